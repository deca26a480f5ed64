"""Questions the LLM proposes after one of its children beat its parent, and their review (which also offers
the questions people asked whose children beat their parents, `evokernel.bank.asked_questions`).

The prompt invites one new question in a tagged section (`PROPOSAL_FORMAT`); when the child turns
out better than its parent the question is stored as `proposed` in the run, and it joins a bank
only when a person accepts it (`evokernel bank review`). Reviewing never writes the run: an accepted
question is a file of the user's bank, a rejected one a line of the bank's REJECTED_FILE.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from evokernel.bank.admit import admit_question
from evokernel.bank.asked_questions import reviewable_human_questions
from evokernel.bank.lint import device_problems, shape_problems
from evokernel.bank.questions import LAYERS, TRIGGERS, load_bank, slug
from evokernel.errors import BadInput, read_text

PROPOSAL_FORMAT = ('<new-question triggers="stagnation" layers="memory">One bounded question that would have '
                   'led you here sooner?</new-question>')
TAG = re.compile(r"<new-question([^>]*)>(.*?)</new-question>", re.DOTALL | re.IGNORECASE)


def _attribute(attributes: str, name: str) -> list[str]:
    found = re.search(rf"{name}\s*=\s*[\"']([^\"']*)[\"']", attributes)
    return [part for part in re.split(r"[,\s]+", found.group(1).lower()) if part] if found else []


def parse_proposed_question(answer: str | None) -> dict | None:
    """The question proposed in an answer (text, triggers, layers), or None if there is no well-formed one."""
    found = TAG.search(answer or "")
    if not found:
        return None
    text = " ".join(found.group(2).split())
    if shape_problems(text):
        return None
    triggers = [t for t in _attribute(found.group(1), "triggers") if t in TRIGGERS] or ["default"]
    layers = [layer for layer in _attribute(found.group(1), "layers") if layer in LAYERS]
    digest = hashlib.sha256(text.encode()).hexdigest()[:4]
    return {"id": f"{slug(text, 5)}-{digest}", "text": text, "triggers": triggers, "layers": layers}


def harvest_proposed_question(store, llm_call_id: int | None, child_id: int | None) -> str | None:
    """Store the question proposed in an LLM call's answer as `proposed`; returns its id."""
    call = store.llm_call(llm_call_id) if llm_call_id is not None else None
    proposal = parse_proposed_question(call["response"]) if call else None
    if proposal is None:
        return None
    store.add_proposed_question(proposal["id"], proposal["text"], proposal["triggers"], proposal["layers"], child_id)
    return proposal["id"]


REJECTED_FILE = "rejected-proposals.txt"  # in a user bank: ids of proposed questions a person rejected


def rejected_ids(bank_dir: Path | None) -> set[str]:
    path = Path(bank_dir) / REJECTED_FILE if bank_dir is not None else None
    return set(read_text(path).split()) if path is not None and path.is_file() else set()


def review_status(rows: list[dict], bank_dir: Path | None) -> dict[str, str]:
    """Per proposed question: accepted (in the user bank), rejected (listed there), or proposed.

    Without a bank the status recorded in the run is shown (runs reviewed by earlier versions).
    """
    if bank_dir is None:
        return {row["id"]: row["status"] for row in rows}
    accepted = {q.id for q in load_bank([bank_dir], builtin=False)} if Path(bank_dir).is_dir() else set()
    rejected = rejected_ids(bank_dir)
    return {row["id"]: "accepted" if row["id"] in accepted else "rejected" if row["id"] in rejected
            else row["status"] for row in rows}


def reviewable_questions(store) -> list[dict]:
    """The questions of a run offered for a bank: those the model proposed (`by` = 'model') and those a person
    asked whose children beat their parents (`by` = 'person')."""
    return [{**row, "by": "model"} for row in store.proposed_questions()] + reviewable_human_questions(store)


def review_proposed(store, question_id: str, accept: bool, bank_dir: Path | None, layers: list[str] | None = None) -> Path:
    """Accept (write to `bank_dir`, after the lint) or reject (list in `bank_dir`) a question of the run
    offered for review; returns the file written. `layers` replace the question's own layer tags (a person's
    question asked without one has none). The run itself is only read (`store` may be read-only)."""
    rows = {row["id"]: row for row in reviewable_questions(store)}
    if question_id not in rows:
        known = ", ".join(rows) or "none"
        raise BadInput(f"run {store.run_dir} has no proposed question '{question_id}' (offered for review: {known})")
    row = rows[question_id]
    if bank_dir is None:
        raise BadInput(f"--{'accept' if accept else 'reject'} {question_id}: give --bank DIR, the user bank "
                       f"that {'it goes to' if accept else 'records the rejection'}")
    bank_dir = Path(bank_dir)
    rejected = rejected_ids(bank_dir)
    if accept:
        layers = list(layers or [layer for layer in row["layers"] if layer in LAYERS])
        notes = (f"proposed in run {Path(store.run_dir).name} after individual {row['from_individual']}"
                 if row["by"] == "model" else f"asked by a person in run {Path(store.run_dir).name}; child "
                                              f"{row['from_individual']} beat its parent")
        # a question about GPU hardware is for GPU tasks only (the lint accepts nothing else)
        devices = ["gpu"] if device_problems(row["text"], []) else []
        path = admit_question(bank_dir, row["text"], row["triggers"], layers, question_id, notes=notes, devices=devices)
        rejected.discard(question_id)
    else:
        rejected.add(question_id)
    path_rejected = bank_dir / REJECTED_FILE
    if rejected or path_rejected.exists():
        bank_dir.mkdir(parents=True, exist_ok=True)
        path_rejected.write_text("".join(f"{q}\n" for q in sorted(rejected)))
    return path if accept else path_rejected
