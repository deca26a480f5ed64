"""Admitting a new question to a user bank: validate the fields, lint it against the bank in force, write it.

Used by `evokernel bank add` and by accepting an LLM-proposed question; a question that fails the
lint is refused with the reasons (BadInput), nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from evokernel.bank.lint import device_problems, duplicate_problems, shape_problems
from evokernel.bank.questions import LAYERS, Question, error_message, load_bank, slug, write_question
from evokernel.errors import BadInput


def admit_question(directory: Path, text: str, triggers: list[str], layers: list[str],
                   question_id: str | None = None, notes: str | None = None, builtin: bool = True,
                   devices: list[str] | None = None, needs: list[str] | None = None) -> Path:
    """Write a checked question to `directory` and return the file written."""
    directory = Path(directory)
    bank = load_bank([directory] if directory.is_dir() else [], builtin=builtin)
    question_id = question_id or slug(text)
    try:
        question = Question(id=question_id, text=text, triggers=triggers or ["default"], layers=layers,
                            devices=devices or [], needs=needs or [], notes=notes)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        raise BadInput(f"question '{question_id}': field '{field}': {error_message(error)}") from None
    if question.id in bank.questions:
        raise BadInput(f"question '{question.id}': id already used in {bank.files[question.id]} (give --id)")
    reasons = (shape_problems(question.text) + device_problems(question.text, question.devices)
               + duplicate_problems(question.text, list(bank)))
    if reasons:
        raise BadInput(f"question '{question.id}' refused: " + "; ".join(reasons))
    if not question.layers:  # the lint refuses a question without one: it is never written
        raise BadInput(f"question '{question.id}' has no layer tag: give --layer (one of {', '.join(LAYERS)})")
    return write_question(directory, question)
