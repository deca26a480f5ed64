"""The files of the `files` model: RUN/prompts/ID.md (a prompt waiting for an answer) and RUN/answers/ID.md
(its answer, dropped there by anyone or written by `evokernel answer`).

Both are written under a hidden name and renamed into place, so a reader on any node of a shared filesystem
sees a whole file or none. An answer is put in place with a hard link, which fails when the name exists:
of two answers given at once for one prompt exactly one lands, and the other is told so. The database
says which prompts are open; the driver takes an answer in the same transaction that stores its child, so
an answer file is used once, also across a killed driver (it stays as the record of what was answered).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from evokernel.errors import BadInput
from evokernel.store.inbox import new_request_id, write_partial
from evokernel.store.records import OpenPrompt

PROMPTS_DIR = "prompts"
ANSWERS_DIR = "answers"
SET_ASIDE_SUFFIX = ".unused"  # an answer file for no open prompt of this run: renamed, kept for a person
ANSWERED_BY = re.compile(r"\A<!-- answered by: (.*?) -->\n")
WITHDRAWN = "<!-- withdrawn -->\n"  # an answer file that withdraws its prompt (`evokernel prompts --withdraw`)
PROMPT_ID = re.compile(r"\A\d{8}T\d{6}Z-[0-9a-f]{6}\Z")


def new_prompt_id(created_at: float) -> str:
    return new_request_id(created_at)


def prompt_path(run_dir: Path, prompt_id: str) -> Path:
    return Path(run_dir) / PROMPTS_DIR / f"{prompt_id}.md"


def answer_path(run_dir: Path, prompt_id: str) -> Path:
    return Path(run_dir) / ANSWERS_DIR / f"{prompt_id}.md"


def prompt_header(run_dir: Path, prompt: OpenPrompt) -> str:
    """What an answerer needs besides the prompt: which run, which prompt, where the answer goes."""
    parents = ", ".join(f"#{p}" for p in prompt.parent_ids) or "-"
    return (f"<!-- evokernel prompt\nrun: {Path(run_dir).resolve()}\nid: {prompt.id}\noperator: {prompt.operator}\n"
            f"question: {prompt.question_id or '-'}\ntrigger: {prompt.trigger or '-'}\nparents: {parents}\n"
            f"answer: write it to {ANSWERS_DIR}/{prompt.id}.md in the run directory, or run\n"
            f"  evokernel answer {Path(run_dir).resolve()} {prompt.id} ANSWER_FILE   (or - for stdin)\n-->\n\n")


def write_prompt(run_dir: Path, prompt: OpenPrompt) -> Path:
    path = prompt_path(run_dir, prompt.id)
    os.replace(write_partial(path, prompt_header(run_dir, prompt) + prompt.prompt), path)
    return path


def write_answer(run_dir: Path, prompt_id: str, text: str, answered_by: str | None = None) -> Path:
    """Put an answer in place in one step; BadInput when the prompt already has one (given at the same time)."""
    path = answer_path(run_dir, prompt_id)
    header = f"<!-- answered by: {' '.join(answered_by.split())} -->\n" if answered_by else ""
    partial = write_partial(path, header + text)
    try:
        os.link(partial, path)
    except FileExistsError:
        raise BadInput(f"prompt {prompt_id} already has an answer ({path})") from None
    finally:
        partial.unlink(missing_ok=True)
    return path


def read_answer(path: Path) -> tuple[str, str | None]:
    """An answer file's text (WITHDRAWN for a withdrawal) and who answered (from `--by`); UnicodeDecodeError when
    it is not UTF-8."""
    text = path.read_bytes().decode("utf-8")
    match = ANSWERED_BY.match(text)
    return (text[match.end():], match.group(1)) if match else (text, None)


def answer_files(run_dir: Path) -> dict[str, Path]:
    """Answer files by prompt id (hidden, partial and set-aside files left out)."""
    try:
        entries = list(os.scandir(Path(run_dir) / ANSWERS_DIR))
    except FileNotFoundError:
        return {}
    return {entry.name[:-3]: Path(entry.path) for entry in entries
            if entry.name.endswith(".md") and not entry.name.startswith(".")}


def set_aside(path: Path) -> Path:
    """Rename an answer file no open prompt takes, so it is reported once and kept for a person."""
    aside = path.with_name(path.name + SET_ASIDE_SUFFIX)
    os.replace(path, aside)
    return aside
