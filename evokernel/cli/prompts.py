"""`evokernel prompts`, `evokernel answer` and `evokernel note`: the prompts of the `files` model, answering one, and
notes on a kernel that later prompts show.

None opens the run's database for writing: `answer` checks the answer against the prompt (read-only)
and puts the file in RUN/answers/ in one step; the run's driver takes it (a stopped run: at `--resume`); `note`
puts its file in RUN/notes/ID/, read when a prompt is written.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click

from evokernel.cli.common import console, json_flag, open_run
from evokernel.errors import BadInput


@click.command()
@click.argument("run")
@click.option("--all", "show_all", is_flag=True, help="Also the prompts already answered (or whose answer failed).")
@click.option("--withdraw", "withdrawn", multiple=True, metavar="ID|open",
              help="Withdraw an open prompt (repeatable; 'open': every open prompt): it gets no answer and its place "
                   "goes to a new prompt about the kernels as they are then.")
@click.option("--by", "withdrawn_by", help="Who withdraws (with --withdraw).")
@json_flag
def prompts(run: str, show_all: bool, withdrawn: tuple[str, ...], withdrawn_by: str | None, as_json: bool) -> None:
    """List RUN's prompts that wait for an answer (model `files`): answer one with `evokernel answer`, or by
    writing RUN/answers/ID.md. RUN is a run directory, a run id under ./runs, or 'latest'."""
    from evokernel.lineage.documents import prompt_documents
    from evokernel.output import Column, print_json, print_table

    if withdrawn:
        _withdraw(run, withdrawn, withdrawn_by)
        return
    with open_run(run) as lin:
        entries = prompt_documents(lin, show_all)
        if as_json:
            print_json(entries)
            return
        if not entries:
            console.print(f"no {'' if show_all else 'open '}prompt in {lin.name}"
                          + ("" if show_all else " (--all: also those answered)"), soft_wrap=True, highlight=False)
            return
        table = [[e["id"], e["status"], datetime.fromtimestamp(e["created_at"]).strftime("%Y-%m-%d %H:%M:%S"),
                  e["operator"], e["question_id"] or "-", e["trigger"] or "-",
                  ", ".join(f"#{p}" for p in e["parent_ids"]), e["answered_by"] or "-",
                  f"#{e['child_id']}" if e["child_id"] else (e["reason"] or "-"), e["file"]] for e in entries]
        print_table(console, [Column("id", no_wrap=True), "status", "written", "operator", "question", "trigger",
                              "parents", "by", "child", "prompt file"], table, title=f"prompts of {lin.name}")


def _withdraw(run: str, ids: tuple[str, ...], withdrawn_by: str | None) -> None:
    """File a withdrawal for each prompt (as an answer file, so a prompt gets an answer or a withdrawal, not both)."""
    from evokernel.store import prompt_box

    with open_run(run) as lin:
        open_ids = [p.id for p in lin.store.prompts("open")]
        wanted = open_ids if "open" in ids else list(dict.fromkeys(ids))
        for prompt_id in wanted:
            if prompt_id not in open_ids:
                raise BadInput(f"--withdraw {prompt_id}: not an open prompt of run {lin.name}")
        run_dir = lin.run_dir
    for prompt_id in wanted:
        prompt_box.write_answer(run_dir, prompt_id, prompt_box.WITHDRAWN, withdrawn_by)
    console.print(f"withdrew {len(wanted)} prompt(s) of {run_dir}: the driver closes them (a stopped run: at its "
                  "next --resume)", soft_wrap=True, highlight=False)


@click.command()
@click.argument("run")
@click.argument("prompt_id")
@click.argument("answer_file")
@click.option("--by", "answered_by", help="Who answered (recorded with the answer).")
def answer(run: str, prompt_id: str, answer_file: str, answered_by: str | None) -> None:
    """Answer RUN's open prompt PROMPT_ID with ANSWER_FILE ('-': standard input): a full kernel in a fenced block,
    or SEARCH/REPLACE edits of the prompt's kernel, as the prompt's answer format says."""
    from evokernel.steering import answer_prompt
    from evokernel.store import resolve_run

    text = _read_text(answer_file)
    receipt = answer_prompt(resolve_run(run), prompt_id, text, answered_by, source=answer_file)
    console.print(receipt.message, soft_wrap=True, highlight=False)


@click.command()
@click.argument("run")
@click.argument("kernel_id", type=int)
@click.argument("note_file", required=False)
@click.option("--by", "noted_by", help="Who gives the note (a person, or the tool that measured).")
def note(run: str, kernel_id: int, note_file: str | None, noted_by: str | None) -> None:
    """Put NOTE_FILE ('-': standard input) on kernel KERNEL_ID of RUN: a measurement the harness does not take
    (profiler figures: memory traffic, stall reasons) or a remark, shown in every later prompt about the kernel
    (its latest two notes). Without NOTE_FILE, print the kernel's notes. Safe while the run is going."""
    from evokernel.store import add_note, kernel_notes

    with open_run(run) as lin:
        lin.store.individual(kernel_id)  # BadInput for a kernel the run does not have
        run_dir = lin.run_dir
    if note_file is None:
        notes = kernel_notes(run_dir, kernel_id)
        for item in notes:
            console.print(f"[bold]{item.note_id}[/] by {item.by or '-'}\n{item.text}", soft_wrap=True,
                          highlight=False)
        if not notes:
            console.print(f"kernel #{kernel_id} of {run_dir} has no note", soft_wrap=True, highlight=False)
        return
    path = add_note(run_dir, kernel_id, _read_text(note_file), noted_by)
    console.print(f"noted on kernel #{kernel_id}: {path} (prompts written from now on show it)", soft_wrap=True,
                  highlight=False)


def _read_text(path: str) -> str:
    """A file's text ('-': standard input); BadInput when the file is missing or not UTF-8."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return text
