"""The `evokernel` command: check kernels, run searches, inspect lineage, manage the question bank.

One module per command group: `check` (check, tasks), `run` (run), `ask` (ask a running search a question), `prompts`
(prompts, answer: the prompts of the `files` model; note: notes on a kernel for its prompts),
`inspection` (runs, lineage, show, diff), `exports` (export, report), `bank` (the bank group), `task` (task new),
`serve` (the live page); what they share is in `common`.
Bad input exits with code 2 and a one-line message; a rejected kernel exits with 1.
"""

from __future__ import annotations

import click

from evokernel.cli import ask, bank, check, exports, inspection, prompts, run, serve, task
from evokernel.cli.common import Group


@click.group(cls=Group)
@click.version_option(package_name="evokernel")
def main() -> None:
    """Evolve fast GPU kernels with a correctness-gated harness."""


for command in (check.check, check.tasks, run.run, ask.ask, prompts.prompts, prompts.answer, prompts.note, inspection.runs,
                inspection.lineage, inspection.show, inspection.diff, exports.export, exports.report, bank.bank,
                task.task, serve.serve):
    main.add_command(command)
