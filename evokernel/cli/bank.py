"""`evokernel bank`: list, add and lint questions, their statistics over runs, review of proposed ones."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evokernel.cli.common import Group, console, json_flag
from evokernel.errors import BadInput

_bank_dirs = click.option("--bank", "bank_dirs", multiple=True, type=click.Path(path_type=Path),
                          help="A user bank directory (repeatable).")
_builtin = click.option("--builtin/--no-builtin", default=True, show_default=True, help="Include the built-in bank.")


@click.group(cls=Group)
def bank() -> None:
    """The question bank: list, add, lint, statistics, review of proposed questions."""


@bank.command("list")
@_bank_dirs
@_builtin
@click.option("--trigger", help="Only questions asked under this trigger.")
@click.option("--device", help="Only questions that apply to this device (gpu or cpu).")
@click.option("--task", "task_name", help="Only the questions a search of this task (built-in name or directory) "
                                          "may ask: its device, and its traits in every scenario.")
@json_flag
def bank_list(bank_dirs: tuple[Path, ...], builtin: bool, trigger: str | None, device: str | None,
              task_name: str | None, as_json: bool) -> None:
    """List the questions in force (piped: one tab-separated line per question after a header line)."""
    from evokernel.bank import TRIGGERS, Subject, load_bank
    from evokernel.bank.questions import DEVICES
    from evokernel.output import Column, print_json, print_table

    if trigger and trigger not in TRIGGERS:
        raise BadInput(f"--trigger '{trigger}': expected one of {', '.join(TRIGGERS)}")
    if device and device not in DEVICES:
        raise BadInput(f"--device '{device}': expected one of {', '.join(DEVICES)}")
    subject = Subject(device)
    if task_name:
        from evokernel.harness import get_task, profile_of

        task = get_task(task_name)
        task_device = profile_of(task.backend).device_kind
        if device and device != task_device:
            raise BadInput(f"--device '{device}': task {task.name} runs on a {task_device}")
        subject = Subject(task_device, task.traits(task.scenarios("all")))
    questions = load_bank(list(bank_dirs), builtin=builtin)
    shown = [q for q in questions if (trigger is None or trigger in q.triggers) and q.applies_to(subject)]
    if as_json:
        print_json([{**q.model_dump(), "file": str(questions.files[q.id])} for q in shown])
        return
    print_table(console, [Column("id", no_wrap=True), "triggers", "layers", "devices", "needs", "text", "file"],
                [[q.id, ", ".join(q.triggers), ", ".join(q.layers), ", ".join(q.devices) or "all",
                  ", ".join(q.needs) or "-", q.text, questions.files[q.id].name] for q in shown],
                title=f"{len(shown)} of {len(questions)} questions" if len(shown) != len(questions)
                else f"{len(questions)} questions")


@bank.command("add")
@click.option("--bank", "bank_dir", required=True, type=click.Path(path_type=Path), help="User bank directory to write to.")
@click.option("--text", required=True, help="The question.")
@click.option("--trigger", "triggers", multiple=True, help="When to ask it (repeatable; default: default).")
@click.option("--layer", "layers", multiple=True,
              help="Layer it points at (repeatable): memory, compute, pipeline, scheduling, numerics, measurement, "
                   "correctness.")
@click.option("--device", "devices", multiple=True, help="Only for tasks on this device, gpu or cpu (repeatable; "
                                                         "default: every device).")
@click.option("--needs", "needs", multiple=True, help="Only for tasks with this trait, e.g. attention, causal, "
                                                      "grouped-query (repeatable; default: any task).")
@click.option("--id", "question_id", help="Id (default: made from the text).")
@click.option("--notes", help="Why the question exists.")
def bank_add(bank_dir: Path, text: str, triggers: tuple[str, ...], layers: tuple[str, ...], devices: tuple[str, ...],
             needs: tuple[str, ...], question_id: str | None, notes: str | None) -> None:
    """Add a question to a user bank (refused with reasons if it fails the lint)."""
    from evokernel.bank import admit_question

    path = admit_question(bank_dir, text, list(triggers), list(layers), question_id, notes, devices=list(devices),
                          needs=list(needs))
    console.print(f"added [bold]{path.stem}[/] to {path}", soft_wrap=True)


@bank.command("lint")
@_bank_dirs
@_builtin
def bank_lint(bank_dirs: tuple[Path, ...], builtin: bool) -> None:
    """Check that every entry is a bounded question and no two repeat each other; exit 1 with reasons."""
    from evokernel.bank import lint_questions, load_bank

    questions = load_bank(list(bank_dirs), builtin=builtin)
    problems = lint_questions(list(questions), questions.files)
    for problem in problems:
        click.echo(str(problem))
    if problems:
        click.echo(f"{len(problems)} problem(s) in {len(questions)} questions", err=True)
        sys.exit(1)
    console.print(f"{len(questions)} questions, no problems")


@bank.command("stats")
@click.argument("runs", nargs=-1, required=True)
@json_flag
def bank_stats(runs: tuple[str, ...], as_json: bool) -> None:
    """Per question over RUNS (run directories or ids): times asked, children correct, better than parent, mean and
    median gain."""
    from evokernel.lineage.statistics import questions_over_runs
    from evokernel.output import Column, print_json, print_table
    from evokernel.store import resolve_run

    frame = questions_over_runs([resolve_run(spec) for spec in runs])
    if as_json:
        print_json(frame)
        return
    if frame.empty:
        console.print(f"no question asked yet in {len(runs)} run(s): the question operators need a model "
                      f"(llm.models in the config, or --model)", soft_wrap=True)
        return
    rows = []
    for row in frame.itertuples(index=False):
        gains = ["-" if gain is None or gain != gain else f"{100 * gain:+.1f}%" for gain in (row.mean_gain, row.median_gain)]
        rows.append([row.question_id, str(row.asked), str(row.correct), str(row.better), *gains,
                     row.text if isinstance(row.text, str) else ""])
    print_table(console, [Column("question", no_wrap=True), *(Column(c, right=True) for c in
                                                                ("asked", "correct", "better", "mean gain",
                                                                 "median gain")), "text"],
                rows, title=f"questions asked in {len(runs)} run(s)")


@bank.command("review")
@click.argument("run")
@click.option("--accept", "accept", multiple=True, help="Accept a question offered (repeatable; needs --bank).")
@click.option("--reject", "reject", multiple=True, help="Reject a question offered (repeatable; needs --bank).")
@click.option("--bank", "bank_dir", type=click.Path(path_type=Path),
              help="User bank directory: accepted questions go there, rejections are listed there.")
@click.option("--layer", "layers", multiple=True,
              help="Layer tag of the questions accepted (repeatable; instead of their own, needed where they have "
                   "none): memory, compute, pipeline, scheduling, numerics, measurement, correctness.")
def bank_review(run: str, accept: tuple[str, ...], reject: tuple[str, ...], bank_dir: Path | None,
                layers: tuple[str, ...]) -> None:
    """Show the questions RUN offers for a bank (those the LLM proposed, and those people asked with
    `evokernel ask` whose children beat their parents); accept or reject them into --bank (the run is only read)."""
    from evokernel.bank import review_proposed
    from evokernel.bank.proposed_questions import review_status, reviewable_questions
    from evokernel.output import Column, print_table
    from evokernel.store import open_readonly, resolve_run

    run_dir = resolve_run(run)
    with open_readonly(run_dir) as store:
        for question_id in accept:
            path = review_proposed(store, question_id, True, bank_dir, list(layers))
            console.print(f"accepted [bold]{question_id}[/] into {path}", soft_wrap=True)
        for question_id in reject:
            path = review_proposed(store, question_id, False, bank_dir)
            console.print(f"rejected [bold]{question_id}[/] (listed in {path})", soft_wrap=True)
        rows = reviewable_questions(store)
    if not rows:
        console.print(f"no questions to review in {run_dir.name}")
        return
    status = review_status(rows, bank_dir)
    print_table(console, [Column("id", no_wrap=True), "status", "by", "after kernel", "triggers", "layers", "text"],
                [[row["id"], status[row["id"]], row["by"], str(row["from_individual"] or "-"),
                  ", ".join(row["triggers"]), ", ".join(row["layers"]), row["text"]] for row in rows],
                title=f"questions offered for review in {run_dir.name}")
