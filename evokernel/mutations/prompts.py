"""Prompts for the question operators. The question is the centre: it opens the prompt and closes it.

Between the two, the prompt gives what is needed to answer it by measurement-minded reasoning:
the kernel, its per-scenario results, what was asked before on its line, and the task's ABI
contract. The answer format (full file or SEARCH/REPLACE edits) comes last.
"""

from __future__ import annotations

from evokernel.bank import Question
from evokernel.bank.proposals import PROPOSAL_FORMAT
from evokernel.harness import LANGUAGES, Task
from evokernel.mutations import Parent

PROMPT_VERSION = 1  # part of the replay key: raise it when a template below changes what is asked

WHY_NOW = {
    "default": "",
    "stagnation": "The best kernel has not improved for a while: the recent changes may all sit in one layer.",
    "declared-limit": "An earlier answer declared this kernel optimal or done, or returned it unchanged. "
                      "Treat that limit as a hypothesis to test, not a fact.",
    "suspicious-gain": "This kernel's last gain over its parent is suspiciously large. Before building on it, "
                       "find what could make the measurement or the result wrong.",
    "repair": "This kernel failed the harness (it did not build or gave wrong results).",
    "crossover": "Two kernels follow; each is better than the other somewhere.",
    "human": "A person watching this search asks this question about this kernel.",
}


def _fence(language: str) -> str:
    return LANGUAGES[language].fence


def results_table(report: dict | None) -> str:
    """Per-scenario verdict and speed from a CheckReport dict, as a small text table."""
    if not report:
        return "(not evaluated yet)"
    lines = []
    if report.get("correct"):
        lines.append(f"correct on every scenario; geomean speedup over the original: {report.get('geomean_speedup'):.3f}")
    else:
        lines.append(f"REJECTED: {report.get('failure') or 'unknown reason'}")
    lines.append("scenario | ok | speedup | time ms | spread")
    for s in report.get("scenarios", []):
        speed = f"{s['speedup']:.3f}" if s.get("speedup") else "-"
        time_ms = f"{s['time_ms']:.4f}" if s.get("time_ms") else "-"
        spread = f"{100 * s['spread']:.1f}%" if s.get("spread") is not None else "-"
        note = f" ({s['error']})" if s.get("error") else ""
        lines.append(f"{s['name']} | {'yes' if s.get('correct') else 'NO'} | {speed} | {time_ms} | {spread}{note}")
    return "\n".join(lines)


def _kernel_section(parent: Parent, language: str, label: str) -> str:
    fitness = f"{parent.fitness:.3f}" if parent.fitness is not None else "none (rejected or not evaluated)"
    return (f"## {label}: kernel #{parent.id}, geomean speedup {fitness}\n```{_fence(language)}\n"
            f"{parent.source.rstrip()}\n```\n\n### Its results per scenario\n{results_table(parent.report)}\n")


def _answer_format(language: str, propose_question: bool) -> str:
    fence = _fence(language)
    text = (
        "## Answer format\n"
        "1. Answer the question in a few sentences: your hypothesis and the measurement that would confirm it.\n"
        "2. Then give the new kernel, either as the complete file in one block:\n"
        f"```{fence}\n<the whole kernel file>\n```\n"
        "or as one or more edits of the kernel above, each with SEARCH text copied exactly from it:\n"
        "<<<<<<< SEARCH\n<lines of the current kernel>\n=======\n<their replacement>\n>>>>>>> REPLACE\n"
        "Keep the entry point and the ABI exactly as the contract states. If you conclude that no change can "
        "make it faster, say so plainly and explain which measurement shows it.\n")
    if propose_question:
        text += ("3. Optionally, one new question that would have led you to this change sooner, bounded, "
                 "with no answer inside, checkable by a measurement, in this form:\n" + PROPOSAL_FORMAT + "\n")
    return text


def _contract(task: Task) -> str:
    return f"## The contract (task {task.name}: {task.description})\n```c\n{task.header.read_text().rstrip()}\n```\n"


def _frame(question: Question, trigger: str, body: str, task: Task, propose: bool) -> str:
    why = WHY_NOW.get(trigger, "")
    return (f"# Question\n{question.text}\n\n" + (f"{why}\n\n" if why else "")
            + "You are improving a kernel that a harness builds, verifies on every scenario against a reference, "
              "and times against the task's original kernel. Answer the question first; let the answer decide "
              "the change.\n\n"
            + body + "\n" + _contract(task) + "\n"
            + f"# The question again\n{question.text}\n\n" + _answer_format(task.language, propose))


def mutation_prompt(parent: Parent, question: Question, trigger: str, task: Task,
                    propose_question: bool = False) -> str:
    """One parent and a question about it."""
    lineage = f"## What was asked before on this line, and what came of it\n{parent.lineage.strip()}\n\n" \
        if parent.lineage.strip() else ""
    body = _kernel_section(parent, task.language, "The kernel") + "\n" + lineage
    return _frame(question, trigger, body, task, propose_question)


def crossover_prompt(first: Parent, second: Parent, question: Question, task: Task,
                     propose_question: bool = False) -> str:
    """Two parents and a question about their difference; the answer is one child (edits apply to the first)."""
    body = (_kernel_section(first, task.language, "Kernel A") + "\n" + _kernel_section(second, task.language, "Kernel B")
            + "\nWrite one kernel that keeps what makes each of them fast. SEARCH/REPLACE edits apply to kernel A.\n")
    return _frame(question, "crossover", body, task, propose_question)


def repair_prompt(failing: Parent, question: Question, task: Task, error: str) -> str:
    """A failing kernel, its compiler or verification error, and a question about the cause."""
    body = (_kernel_section(failing, task.language, "The failing kernel")
            + f"\n### The error\n```\n{error.strip()[-4000:]}\n```\n"
            + "\nFix the cause of the error without giving up the kernel's design.\n")
    return _frame(question, "repair", body, task, False)
