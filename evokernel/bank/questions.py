"""Questions and banks: the YAML format, loading with errors that name file/question/field, writing.

A bank file holds `questions:`, a list of mappings with `id`, `text`, `triggers`, `layers` (from the
fixed set LAYERS), optional `devices` (the kinds of device the question applies to, `gpu` and/or `cpu`;
absent: all), optional `needs` (traits of the task the question is about, all of which the task must have:
`attention`, `causal`, `grouped-query`, or a user task's own words; absent: any task) and optional `notes`.
The built-in bank ships as package data in `builtin/`; user banks are directories of the same YAML, loaded
after it (an id may appear only once across all of them).
A question file may hold at most MAX_FILE_BYTES.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evokernel.errors import BadInput, read_yaml

BUILTIN_DIR = Path(__file__).parent / "builtin"
TRIGGERS = ("default", "stagnation", "declared-limit", "suspicious-gain", "repair", "crossover", "first-kernel")
# `reference`: writing a task's first kernel from its reference (the `first-kernel` operator asks these)
LAYERS = ("memory", "compute", "pipeline", "scheduling", "numerics", "measurement", "correctness", "reference")
DEVICES = ("gpu", "cpu")
Device = Literal["gpu", "cpu"]
MAX_FILE_BYTES = 1 << 20  # a question file is a few kilobytes; anything near this is not a question bank


def error_message(error: dict) -> str:
    """A pydantic error's message without pydantic's "Value error, " prefix."""
    return str(error["msg"]).removeprefix("Value error, ")
Trigger = Literal["default", "stagnation", "declared-limit", "suspicious-gain", "repair", "crossover", "first-kernel"]
ID_PATTERN = r"^[a-z0-9][a-z0-9-]{1,63}$"
TRAIT_PATTERN = r"[a-z0-9][a-z0-9-]{0,39}"


class Question(BaseModel):
    """One question: when it may be asked (triggers) and which layer of the system it points at."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=ID_PATTERN, description="lowercase letters, digits and dashes")
    text: str = Field(min_length=1)
    triggers: list[Trigger] = Field(min_length=1)
    layers: list[str] = Field(default_factory=list)
    devices: list[Device] = Field(default_factory=list, description="gpu and/or cpu; empty: every device")
    needs: list[str] = Field(default_factory=list, description="task traits it is about; empty: any task")
    notes: str | None = None

    @field_validator("text")
    @classmethod
    def _one_line(cls, text: str) -> str:
        return " ".join(text.split())

    @field_validator("layers")
    @classmethod
    def _layer_tags(cls, layers: list[str]) -> list[str]:
        for layer in layers:
            if layer not in LAYERS:
                raise ValueError(f"layer '{layer}' is not one of {', '.join(LAYERS)}")
        return layers

    @field_validator("needs")
    @classmethod
    def _trait_words(cls, needs: list[str]) -> list[str]:
        for trait in needs:
            if not re.fullmatch(TRAIT_PATTERN, trait):
                raise ValueError(f"trait '{trait}' is not a lowercase word (letters, digits, dashes)")
        return needs

    def applies_to(self, subject: Subject) -> bool:
        """Whether the question may be asked about `subject`'s kernels (what it leaves unknown is not filtered)."""
        device_fits = subject.device is None or not self.devices or subject.device in self.devices
        return device_fits and (subject.traits is None or set(self.needs) <= subject.traits)


@dataclass(frozen=True)
class Subject:
    """What questions are asked about: the kind of device the task's kernels run on (`gpu`, `cpu`) and the task's
    traits in the run's scenarios (`Task.traits`). None: unknown, any question fits. A question about causal
    masks is not asked of a task without one, nor a question about GPU hardware of a CPU task."""

    device: str | None = None
    traits: frozenset[str] | None = None

    def describe(self) -> str:
        """E.g. "a gpu task (traits: attention, causal)"."""
        traits = "" if self.traits is None else f" (traits: {', '.join(sorted(self.traits)) or 'none'})"
        return f"a {self.device or 'any-device'} task{traits}"


@dataclass
class Bank:
    """All questions in force, by id, with the file each came from."""

    questions: dict[str, Question] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)

    def add(self, question: Question, path: Path) -> None:
        if question.id in self.questions:
            raise BadInput(f"{path}: question '{question.id}': field 'id': already defined in {self.files[question.id]}")
        self.questions[question.id] = question
        self.files[question.id] = path

    def get(self, question_id: str) -> Question:
        if question_id not in self.questions:
            raise BadInput(f"no question '{question_id}' in the bank")
        return self.questions[question_id]

    def for_trigger(self, trigger: str, subject: Subject = Subject()) -> list[Question]:
        """The questions allowed under `trigger` that apply to `subject`."""
        return [q for q in self.questions.values() if trigger in q.triggers and q.applies_to(subject)]

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self):
        return iter(self.questions.values())


def _field(location: tuple) -> str:
    return ".".join(str(part) for part in location) or "(entry)"


def load_file(path: Path) -> list[Question]:
    """Questions of one YAML file; BadInput names the file, the question and the field."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise BadInput(f"{path}: {size / 1e6:.1f} MB, more than a question file may hold "
                       f"({MAX_FILE_BYTES // 1024} KiB): split it or keep only the questions")
    data = read_yaml(path)
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list) or set(data) - {"questions"}:
        raise BadInput(f"{path}: expected a mapping with one key 'questions' holding a list of questions")
    questions = []
    for index, entry in enumerate(data["questions"]):
        name = entry.get("id") if isinstance(entry, dict) else None
        label = f"question '{name}'" if isinstance(name, str) else f"question #{index + 1}"
        if not isinstance(entry, dict):
            raise BadInput(f"{path}: {label}: expected a mapping with id, text, triggers, layers")
        try:
            questions.append(Question.model_validate(entry))
        except ValidationError as exc:
            error = exc.errors()[0]
            raise BadInput(f"{path}: {label}: field '{_field(error['loc'])}': {error_message(error)}") from None
    return questions


def bank_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise BadInput(f"bank directory not found: {directory}")
    return sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])


def load_bank(dirs: list[Path] = (), builtin: bool = True) -> Bank:
    """The built-in bank (unless `builtin=False`) plus every YAML file in `dirs`."""
    bank = Bank()
    for directory in ([BUILTIN_DIR] if builtin else []) + [Path(d) for d in dirs]:
        for path in bank_files(directory):
            for question in load_file(path):
                bank.add(question, path)
    return bank


def slug(text: str, words: int = 6) -> str:
    """A readable id made from the first content words of a question."""
    filler = {"the", "does", "did", "are", "is", "was", "what", "which", "how", "and", "for", "with", "this", "that",
              "you", "your", "there", "its", "any", "each", "every"}
    tokens = [t for t in re.findall(r"[a-z0-9]+", text.lower()) if len(t) > 2 and t not in filler][:words]
    return "-".join(tokens)[:60].strip("-") or "question"


def write_question(directory: Path, question: Question) -> Path:
    """Write one question to `<directory>/<id>.yaml` (a bank file of its own)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{question.id}.yaml"
    if path.exists():
        raise BadInput(f"{path} already exists: choose another --id")
    entry = {key: value for key, value in question.model_dump(exclude_none=True).items()
             if value or key not in ("devices", "needs")}
    path.write_text(yaml.safe_dump({"questions": [entry]}, sort_keys=False, width=100, allow_unicode=True))
    return path
