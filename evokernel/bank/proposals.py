"""Questions the LLM proposes after one of its children beat its parent.

The prompt invites one new question in a tagged section (`PROPOSAL_FORMAT`); when the child turns
out better than its parent the question is stored as `proposed` in the run, and it joins a bank
only when a person accepts it (`evokernel bank review`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from evokernel.bank.admit import admit_question
from evokernel.bank.lint import shape_problems
from evokernel.bank.questions import TRIGGERS, slug
from evokernel.errors import BadInput

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
    layers = [layer for layer in _attribute(found.group(1), "layers") if re.fullmatch(r"[a-z][a-z0-9-]*", layer)]
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


def review_proposed(store, question_id: str, accept: bool, bank_dir: Path | None) -> Path | None:
    """Accept (write to `bank_dir`, after the lint) or reject a proposed question of a run."""
    rows = {row["id"]: row for row in store.proposed_questions()}
    if question_id not in rows:
        known = ", ".join(rows) or "none"
        raise BadInput(f"run {store.run_dir} has no proposed question '{question_id}' (proposed: {known})")
    row = rows[question_id]
    if not accept:
        store.set_question_status(question_id, "rejected")
        return None
    if bank_dir is None:
        raise BadInput(f"--accept {question_id}: give --bank DIR, the user bank to write it to")
    path = admit_question(bank_dir, row["text"], row["triggers"], row["layers"], question_id,
                          notes=f"proposed in run {store.run_dir.name} after individual {row['from_individual']}")
    store.set_question_status(question_id, "accepted")
    return path
