"""Inspecting runs in the terminal: `runs`, `lineage`, `show` and `diff` (all read-only; a run written out as
files is `evokernel.cli.exports`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evokernel.cli.common import console, fmt, json_flag, open_run, print_code
from evokernel.errors import BadInput


def _when(timestamp: float | None) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else "-"


def _gain(before: float | None, after: float | None) -> str:
    return f" ({100 * (after / before - 1):+.1f}%)" if before and after else ""


def _kernel_label(run, ind, parent=None) -> str:
    """One line about a kernel; its gain is over `parent` (default: its first parent)."""
    from rich.markup import escape

    question = f" [magenta]{escape(ind.question_id)}[/]" if ind.question_id else ""
    if parent is None:
        parent = next(iter(run.parents(ind.id)), None)
    if ind.status == "correct":
        result = f"[green]{fmt(ind.fitness)}[/]" + _gain(parent.fitness if parent else None, ind.fitness)
    elif ind.status == "rejected":
        reason = (run.failure(ind.id) or "").strip().splitlines()
        result = f"[red]rejected[/]: {escape(reason[0] if reason else '')}"
    elif _still_running(run):
        result = f"[dim]{ind.status}[/]"
    else:  # proposed, then the run stopped before its check (a budget, an interrupt)
        result = "[dim]not evaluated (the run stopped first; --resume evaluates it)[/]"
    return f"[bold]#{ind.id}[/] {ind.operator}{question} {result}"


def _still_running(run) -> bool:
    from evokernel.store import run_status

    return run_status(run.run_dir, run.store.meta().get("status")) == "running"


def _print_failed_proposals(what: str, counts) -> None:
    """One line: the proposals (of the run, or from a kernel) that made no kernel, by operator and reason."""
    from evokernel.lineage.statistics import describe_proposal_failures

    if counts:
        console.print(f"failed proposals {what} (operator: reason ×count): {describe_proposal_failures(counts)}",
                      soft_wrap=True, markup=False, highlight=False)


@click.command()
@click.argument("directory", type=click.Path(path_type=Path), default=Path("runs"))
@json_flag
def runs(directory: Path, as_json: bool) -> None:
    """List the runs under DIRECTORY (default ./runs), newest first.

    Piped output is one tab-separated line per run after a header line.
    """
    from collections import Counter
    from dataclasses import asdict

    from rich import box

    from evokernel.lineage import find_runs
    from evokernel.lineage.statistics import describe_proposal_failures
    from evokernel.output import Column, print_json, print_table

    summaries = find_runs(directory)
    if as_json:
        print_json([asdict(s) for s in summaries])
        return
    if not summaries:
        console.print(f"no runs under {directory}/")
        return
    columns = [Column("run", no_wrap=True), Column("status", no_wrap=True), Column("task"),
               *(Column(name, right=True) for name in ("evaluations", "best geomean", "cost $", "started")),
               Column("failed proposals (operator: reason ×count)")]
    rows = [[s.id, s.status, s.task or "-", f"{s.evaluations} ({s.correct} ok)",
             f"{fmt(s.best)} (#{s.best_id})" if s.best_id else "-", f"{s.cost_usd:.4f}", _when(s.started_at),
             describe_proposal_failures(Counter({(f["operator"], f["kind"]): f["count"] for f in s.proposal_failures}))
             or "-"]
            for s in summaries]
    print_table(console, columns, rows, title=f"runs under {directory}/", box=box.SIMPLE_HEAD)
    for s in summaries:
        if s.driver_gone:
            console.print(f"{s.id}: stopped, {s.stop_reason}", soft_wrap=True, highlight=False)


@click.command()
@click.argument("run")
@click.argument("kernel", metavar="[ID]", type=int, required=False)
@click.option("--id", "kernel_id", type=int, help="The kernel to trace (the same as ID after RUN).")
@click.option("--best", is_flag=True, help="Trace the best kernel (the default).")
@click.option("--top", type=click.IntRange(1), help="Trace each of the K best kernels.")
@click.option("--tree", is_flag=True, help="Draw the descendant tree instead: of every seed (with --id: of that "
                                           "kernel; with --best or --top: only the paths to those kernels).")
@json_flag
def lineage(run: str, kernel: int | None, kernel_id: int | None, best: bool, top: int | None, tree: bool,
            as_json: bool) -> None:
    """Where a kernel came from: one line per step from the seed, with the question asked and the gain.

    RUN is a run directory, a run id under ./runs, or 'latest'; ID a kernel of it (as in `show RUN ID`). In
    the tree a kernel with two parents appears under both, each time with its gain over that parent.
    """
    from rich.markup import escape

    from evokernel.lineage.documents import select_trees, step_document, tree_document
    from evokernel.lineage.statistics import proposal_failure_counts
    from evokernel.output import print_json

    if kernel is not None and kernel_id is not None and kernel != kernel_id:
        raise BadInput(f"two kernels given: ID {kernel} and --id {kernel_id}")
    kernel_id = kernel if kernel is not None else kernel_id
    if (kernel_id is not None) + best + (top is not None) > 1:
        raise BadInput("choose one of ID (or --id), --best, --top")
    with open_run(run) as lin:
        if tree:
            trees, stars = select_trees(lin, kernel_id, best, top)
            if as_json:
                print_json([tree_document(lin, node, None, stars) for node in trees])
                return
            if console.is_terminal:
                _print_rich_trees(lin, trees, stars)
            else:
                _print_plain_trees(lin, trees, stars)
            _print_failed_proposals(f"in run {lin.name}", proposal_failure_counts(lin.store))
            return
        targets = [lin.get(kernel_id)] if kernel_id is not None else lin.top(top) if top else [lin.best()]
        if not targets:
            raise BadInput(f"run {lin.name} has no correct kernel yet")
        if as_json:
            print_json([{"id": t.id, "status": t.status, "fitness": t.fitness, "retime": lin.retime(t.id),
                         "steps": [step_document(lin, step) for step in lin.ancestry(t.id)]} for t in targets])
            return
        for target in targets:
            steps = lin.ancestry(target.id)
            console.print(f"[bold]run {escape(lin.name)} · kernel #{target.id}[/] · "
                          f"{target.status} {fmt(target.fitness)} · {len(steps) - 1} steps from seed "
                          f"#{steps[0].individual.id}", soft_wrap=True)
            retime = lin.retime(target.id)
            if retime:
                from evokernel.lineage import describe_retime

                colour = "green" if retime["verdict"] == "gain" else "yellow"
                console.print(f"  [{colour}]{escape(describe_retime(retime))}[/]", soft_wrap=True, highlight=False)
            for step in steps:
                ind, parent = step.individual, step.parent
                question = (f"[magenta]{escape(ind.question_id)}[/] \"{escape(step.question_text or '?')}\""
                            f"{lin.question_note(ind.question_id)}" if ind.question_id else "[dim]no question[/]")
                before = fmt(parent.fitness) if parent else "-"
                after = fmt(ind.fitness) if ind.status == "correct" else f"[red]{ind.status}[/]"
                others = f" (+ {', '.join(f'#{p}' for p in step.other_parents)})" if step.other_parents else ""
                line = (f"  #{ind.id:<4} {ind.operator}{others} · {question} · {escape(ind.model or '-')} · "
                        f"{before} -> {after}{_gain(parent.fitness if parent else None, ind.fitness)}")
                if parent:
                    line += (f" · wins {len(step.wins)}: {', '.join(step.wins) or '-'} · "
                             f"losses {len(step.losses)}: {', '.join(step.losses) or '-'}"
                             + (f" · {len(step.ties)} within noise" if step.ties else ""))
                console.print(line, soft_wrap=True)
                if ind.status == "rejected":
                    console.print(f"         [red]{escape(lin.failure(ind.id) or '')}[/]", soft_wrap=True)
        _print_failed_proposals(f"in run {lin.name}", proposal_failure_counts(lin.store))


def _tree_label(lin, node, parent, stars: set[int]) -> str:
    return (_kernel_label(lin, node.individual, parent) + (" [yellow]★[/]" if node.individual.id in stars else "")
            + (" [dim](shown above)[/]" if node.repeat else ""))


def _print_rich_trees(lin, trees, stars: set[int]) -> None:
    from rich.markup import escape
    from rich.tree import Tree

    def draw(node, parent, branch) -> None:
        sub = branch.add(_tree_label(lin, node, parent, stars))
        for child in node.children:
            draw(child, node.individual, sub)

    for node in trees:
        top = Tree(f"run {escape(lin.name)}")
        draw(node, None, top)
        console.print(top)


def _print_plain_trees(lin, trees, stars: set[int]) -> None:
    """The tree as plain lines (output not a terminal): one kernel per line, nothing wrapped or cut."""
    from rich.text import Text

    def draw(node, parent, prefix: str, last: bool) -> None:
        label = Text.from_markup(_tree_label(lin, node, parent, stars)).plain
        click.echo(prefix + ("└── " if last else "├── ") + label)
        for n, child in enumerate(node.children):
            draw(child, node.individual, prefix + ("    " if last else "│   "), n == len(node.children) - 1)

    for node in trees:
        click.echo(f"run {lin.name}")
        draw(node, None, "", True)


def _print_deltas(title: str, deltas, before: str, after: str) -> None:
    from rich.text import Text

    from evokernel.output import Column, print_table

    colour = {"win": "green", "fixed": "green", "loss": "red", "broke": "red"}
    console.print(f"[bold]{title}[/]", markup=True, highlight=False, soft_wrap=True)
    columns = [Column("scenario"), *(Column(c, right=True) for c in (before, after, "ratio", "noise", "verdict"))]
    print_table(console, columns, [[d.name, fmt(d.before), fmt(d.after), fmt(d.ratio), f"{100 * d.noise:.1f}%",
                                    Text(d.verdict, style=colour.get(d.verdict, "dim"))] for d in deltas])


@click.command()
@click.argument("run")
@click.argument("kernel_id", metavar="ID", type=int)
@json_flag
def show(run: str, kernel_id: int, as_json: bool) -> None:
    """Everything about kernel ID: source, diff against its parents, per-scenario results, notes, build log, LLM
    exchange.

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    from collections import Counter

    from rich.markup import escape
    from rich.rule import Rule

    from evokernel.lineage.documents import kernel_document
    from evokernel.output import print_json, print_table, scenario_table
    from evokernel.store import kernel_notes

    with open_run(run) as lin:
        ind = lin.get(kernel_id)
        if as_json:
            print_json(kernel_document(lin, ind.id))
            return
        parents = lin.parents(ind.id)
        failed_proposals = lin.failed_proposals(ind.id)
        console.print(Rule(f"kernel #{ind.id} of run {escape(lin.name)}"))
        parent_ids = ", ".join(f"#{p}" for p in ind.parent_ids) or "none (seed)"
        console.print(_kernel_label(lin, ind), soft_wrap=True)
        console.print(f"operator {ind.operator} · parents {parent_ids} · generation {ind.generation} · "
                      f"model {escape(ind.model or '-')} · trigger {escape(ind.trigger or '-')} · "
                      f"{escape(lin.source_name(ind.id))}", soft_wrap=True)
        if ind.question_id:
            text = lin.question_text(ind.question_id) or "(text not in the bank or the run)"
            console.print(f"question [magenta]{escape(ind.question_id)}[/]{lin.question_note(ind.question_id)}: "
                          f"{escape(text)}", soft_wrap=True)
        if ind.knobs:
            console.print(f"knobs: {escape(json.dumps(ind.knobs, sort_keys=True))}", soft_wrap=True)
        _print_failed_proposals(f"from #{ind.id}", Counter((f.operator, f.kind) for f in failed_proposals))
        from evokernel.harness import LANGUAGES

        console.print(Rule("source"))
        print_code(lin.source(ind.id), LANGUAGES[ind.language].fence, line_numbers=True)
        for parent in parents:
            console.print(Rule(f"diff against parent #{parent.id}"))
            print_code(lin.diff(parent.id, ind.id) or "(identical)", "diff")
        console.print(Rule("scenarios"))
        rows = lin.scenarios(ind.id)
        if rows:
            print_table(console, *scenario_table(rows, lin.speed_reference.column))
            if lin.screened(ind.id):
                console.print("[dim]screened: timed alone against the speed reference's times from an earlier "
                              "interleaved check on the same GPU (it was not near the best)[/]", soft_wrap=True)
            if parents:
                _print_deltas(f"against parent #{parents[0].id}", lin.compare(parents[0].id, ind.id),
                              f"#{parents[0].id}", f"#{ind.id}")
        else:
            console.print("[dim]no scenario results (rejected before running, or not evaluated yet)[/]")
        if ind.failure:
            console.print(f"[red]rejected:[/] {escape(lin.failure(ind.id))}", soft_wrap=True)
        for note in kernel_notes(lin.run_dir, ind.id):
            console.print(Rule(f"note {note.note_id} by {escape(note.by or '-')}"))
            console.print(note.text, markup=False, highlight=False, soft_wrap=True)
        if ind.build_log:
            console.print(Rule("build log"))
            console.print(lin.build_log(ind.id), markup=False, highlight=False, soft_wrap=True)
        call = lin.llm_call(ind.id)
        if call:
            console.print(Rule(f"LLM exchange · {escape(call['model'])} · {call['prompt_tokens'] or '?'} + "
                               f"{call['completion_tokens'] or '?'} tokens · ${call['cost_usd']:.4f}"))
            console.print("[bold]prompt[/]")
            console.print(call["prompt"], markup=False, highlight=False, soft_wrap=True)
            console.print("[bold]answer[/]")
            console.print(call["response"] or call["error"] or "", markup=False, highlight=False, soft_wrap=True)


@click.command()
@click.argument("run")
@click.argument("id_a", metavar="ID_A", type=int)
@click.argument("id_b", metavar="ID_B", type=int)
def diff(run: str, id_a: int, id_b: int) -> None:
    """Source diff from kernel ID_A to ID_B and their per-scenario speeds.

    RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    with open_run(run) as lin:
        a, b = lin.get(id_a), lin.get(id_b)
        print_code(lin.diff(a.id, b.id) or "(identical sources)", "diff")
        _print_deltas(f"speedup over {lin.speed_reference.words}: #{a.id} -> #{b.id}", lin.compare(a.id, b.id),
                      f"#{a.id}", f"#{b.id}")
        console.print(f"geomean: #{a.id} {fmt(a.fitness)} ({a.status}) -> #{b.id} {fmt(b.fitness)} ({b.status})"
                      f"{_gain(a.fitness, b.fitness)}")
