"""`evokernel ask`: put a question to a running search (or to the next `--resume` of a stopped one), and list
the questions people asked a run with what they produced."""

from __future__ import annotations

import click

from evokernel.cli.common import console, json_flag, open_run
from evokernel.errors import BadInput


@click.command()
@click.argument("run")
@click.argument("question", required=False)
@click.option("--target", default="best", show_default=True,
              help="The kernel to ask about: 'best' (the best kernel when the question is asked) or a kernel id.")
@click.option("--times", default="1", show_default=True,
              help="How many times to ask it (1 to 20); each answer is one child.")
@click.option("--layer", "layers", multiple=True,
              help="Layer it points at, kept if it joins a bank (repeatable): memory, compute, pipeline, "
                   "scheduling, numerics, measurement, correctness.")
@click.option("--list", "show_list", is_flag=True, help="List the questions people asked RUN and what they produced.")
@json_flag
def ask(run: str, question: str | None, target: str, times: str, layers: tuple[str, ...], show_list: bool,
        as_json: bool) -> None:
    """Ask RUN's search QUESTION about a kernel (default: its best), through the same prompt, evaluation and
    lineage as a question from the bank.

    The question must pass the bank's lint (a question, not a command). The run's driver takes it at its
    next free proposal slot (a stopped run: at its next `evokernel run --resume`); RUN may be on a filesystem
    the driver shares with this machine. RUN is a run directory, a run id under ./runs, or 'latest'.
    """
    if show_list:
        if question is not None:
            raise BadInput("give either QUESTION or --list")
        _list(run, as_json)
        return
    if question is None:
        raise BadInput("give the QUESTION to ask (or --list)")
    _queue(run, question, target, times, list(layers))


def _queue(run: str, text: str, target: str, times: str, layers: list[str]) -> None:
    from evokernel.steering import queue_question
    from evokernel.store import resolve_run

    receipt = queue_question(resolve_run(run), text, target, times, layers)
    for line in (receipt.message, *receipt.notes):
        console.print(line, soft_wrap=True, highlight=False)


def _list(run: str, as_json: bool) -> None:
    from datetime import datetime

    from evokernel.lineage.documents import asked_documents
    from evokernel.output import Column, print_json, print_table

    with open_run(run) as lin:
        entries = asked_documents(lin)
        if as_json:
            print_json(entries)
            return
        if not entries:
            console.print(f"no question asked by a person in {lin.name} (ask one: evokernel ask RUN \"...?\")",
                          soft_wrap=True, highlight=False)
            return
        rows = [[q["id"], q["status"], datetime.fromtimestamp(q["asked_at"]).strftime("%Y-%m-%d %H:%M:%S"),
                 q["asked_by"] or "-", "best" if q["target"] == "best" else f"#{q['target']}",
                 f"{len(q['outcomes'])}/{q['times']}", "; ".join(q["produced"]) or "-", q["question_id"], q["text"]]
                for q in entries]
        print_table(console, [Column("request", no_wrap=True), "status", "asked at", "by", "target",
                              Column("asked", right=True), "produced", "question", "text"], rows,
                    title=f"questions asked by people in {lin.name}")
