"""`evokernel task new`: a task directory written from a PyTorch module file (the KernelBench format)."""

from __future__ import annotations

from pathlib import Path

import click

from evokernel.cli.common import console


@click.group()
def task() -> None:
    """Make tasks."""


@task.command()
@click.argument("name")
@click.option("--from-module", "module_path", required=True, type=click.Path(path_type=Path),
              help="A module file defining Model(nn.Module), get_inputs() and get_init_inputs().")
@click.option("--seed-kernel", "seed_kernel", required=True, type=click.Path(path_type=Path),
              help="The task's first kernel (its original): a correct implementation of the module's forward in "
                   "the task's language, against the header this command writes (write it after a first run "
                   "with any file that defines the entry, or take the header from an earlier run).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="The directory to write (default: ./NAME).")
@click.option("--language", type=click.Choice(["c", "cuda"]), default="c", show_default=True)
@click.option("--dtype", help="Element type of every tensor (default: float32 for c, bfloat16 for cuda).")
def new(name: str, module_path: Path, seed_kernel: Path, output: Path | None, language: str, dtype: str | None) -> None:
    """Write task NAME from a module file: ABI header, task.py (the module's forward is the reference, PyTorch
    eager a speed reference), scenarios scaled from get_inputs(), the seed kernel as its original, a config."""
    from evokernel.harness import LANGUAGES
    from evokernel.harness.task_from_module import write_task

    directory = write_task(name, module_path, seed_kernel, output or Path(name), language,
                           dtype or ("float32" if language == "c" else "bfloat16"))
    console.print(f"wrote task {name} to {directory}/\n  evokernel check {directory}/original"
                  f"{LANGUAGES[language].extension} --task {directory} --baselines\n"
                  f"  evokernel run {directory}/config.yaml", soft_wrap=True, highlight=False)
