"""`evokernel serve`: a local web page that shows runs live and takes questions, answers and bank acceptances."""

from __future__ import annotations

from pathlib import Path

import click

from evokernel.cli.common import console


@click.command()
@click.argument("run_or_runs", metavar="[RUN_OR_RUNS_DIR]", default="runs")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; another than 127.0.0.1 lets other machines read the runs (actions still "
                   "need the token).")
@click.option("--bank", "bank_dir", type=click.Path(path_type=Path),
              help="User bank directory that questions accepted from the page go to.")
def serve(run_or_runs: str, port: int, host: str, bank_dir: Path | None) -> None:
    """Serve a page that shows RUN_OR_RUNS_DIR (a run, a run id under ./runs, 'latest', or a directory of runs;
    default ./runs) as it is written: status, best over time, the lineage graph, any kernel's results, source,
    diff and LLM exchange, failures, cost, bank statistics. From the page you can ask a question, answer an open
    prompt of the `files` model and accept a question into --bank; each needs the token in the printed address.

    The runs are only read; actions drop the same files `evokernel ask` and `evokernel answer` write.
    """
    from evokernel.web import ServedRuns, Server

    server = Server(ServedRuns.from_spec(run_or_runs), host, port, bank_dir)
    shown = f"run {server.served.only}" if server.served.only else f"the runs under {server.served.root}"
    console.print(f"serving {shown} at {server.url}", soft_wrap=True, highlight=False)
    console.print("open that address (the token after # is needed to ask, answer and accept); Ctrl-C stops",
                  soft_wrap=True, highlight=False)
    server.run()
