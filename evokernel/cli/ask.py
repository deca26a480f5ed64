"""`evokernel ask`: put a question to a running search (or to the next `--resume` of a stopped one), and list
the questions people asked a run with what they produced."""

from __future__ import annotations

import click

from evokernel.cli.common import console, fmt, json_flag, open_run
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
    from evokernel.bank.asked_questions import MAX_TIMES, make_request
    from evokernel.search.question_queue import describe_target
    from evokernel.store import inbox

    with open_run(run) as lin:
        if not times.strip().isdigit():
            raise BadInput(f"--times '{times}': expected a whole number from 1 to {MAX_TIMES}")
        request = make_request(text, target, int(times), layers)
        if request.target != "best":
            kernel = lin.get(int(request.target))
            if kernel.status != "correct":
                raise BadInput(f"kernel #{kernel.id} of run {lin.name} is {kernel.status}: ask about a correct "
                               "kernel (or --target best)")
        meta = lin.store.meta()
        run_dir = lin.run_dir
    try:
        inbox.post(run_dir, request)
    except OSError as exc:
        raise BadInput(f"cannot queue the question in {run_dir / inbox.INBOX_NAME}: {exc.strerror or exc}") from None
    when = ("the driver asks it at its next free proposal slot" if meta.get("status") == "running"
            else f"the run is {meta.get('status', 'not running')}: it is asked when the run is resumed "
                 f"(evokernel run --resume {run_dir})")
    console.print(f"queued {request.id}: question {request.question_id} about {describe_target(request.target)}, "
                  f"{request.times} time(s); {when}", soft_wrap=True, highlight=False)
    if not ((meta.get("config") or {}).get("llm") or {}).get("models"):
        console.print("note: the run's config names no model: resume it with --model to have the question asked",
                      soft_wrap=True, highlight=False)


def _produced(lin, outcome: dict) -> str:
    """What one asking produced, in a few words."""
    if "child" in outcome:
        child = lin.individuals.get(outcome["child"])
        if child is None:
            return f"#{outcome['child']}"
        if child.status == "correct":
            gain = lin.gain(child)
            return f"#{child.id} {fmt(child.fitness)}" + (f" ({100 * (gain - 1):+.1f}%)" if gain else "")
        return f"#{child.id} {child.status}"
    if "duplicate_of" in outcome:
        return f"same as #{outcome['duplicate_of']}"
    if "prompt" in outcome:
        return f"prompt {outcome['prompt']} (model files: see evokernel prompts)"
    return f"failed: {outcome.get('failed', '?')}"


def _list(run: str, as_json: bool) -> None:
    from dataclasses import asdict
    from datetime import datetime

    from evokernel.output import Column, print_json, print_table
    from evokernel.store import inbox

    with open_run(run) as lin:
        received = lin.human_questions
        waiting, _ = inbox.queued(lin.run_dir)
        ids = {q.id for q in received}
        entries = [(q, "queued") for _, q in waiting if q.id not in ids]
        entries += [(q, "answered" if q.asked >= q.times else "received") for q in received]
        entries.sort(key=lambda entry: (entry[0].asked_at, entry[0].id))
        if as_json:
            print_json([{**asdict(q), "status": status, "produced": [_produced(lin, o) for o in q.outcomes]}
                        for q, status in entries])
            return
        if not entries:
            console.print(f"no question asked by a person in {lin.name} (ask one: evokernel ask RUN \"...?\")",
                          soft_wrap=True, highlight=False)
            return
        rows = [[q.id, status, datetime.fromtimestamp(q.asked_at).strftime("%Y-%m-%d %H:%M:%S"),
                 q.asked_by or "-", "best" if q.target == "best" else f"#{q.target}", f"{q.asked}/{q.times}",
                 "; ".join(_produced(lin, o) for o in q.outcomes) or "-", q.question_id, q.text]
                for q, status in entries]
        print_table(console, [Column("request", no_wrap=True), "status", "asked at", "by", "target",
                              Column("asked", right=True), "produced", "question", "text"], rows,
                    title=f"questions asked by people in {lin.name}")
