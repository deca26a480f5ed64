"""`evokernel task new`: a task directory written from a PyTorch module file (the KernelBench format)."""

from __future__ import annotations

from pathlib import Path

import click

from evokernel.cli.common import console
from evokernel.errors import BadInput


@click.group()
def task() -> None:
    """Make tasks: `task new NAME --from-module FILE` writes one from a PyTorch module file."""


@task.command()
@click.argument("name")
@click.option("--from-module", "module_path", required=True, type=click.Path(path_type=Path),
              help="A module file defining Model(nn.Module), get_inputs() and get_init_inputs().")
@click.option("--seed-kernel", "seed_kernel", type=click.Path(path_type=Path),
              help="Your first kernel for the task (its original), against the header this command writes.")
@click.option("--model", help="Or: a model writes the first kernel now (any litellm model string, or cmd:COMMAND); "
                              "with neither, a search writes it.")
@click.option("--api-base", help="API base URL for the model (e.g. a local OpenAI-compatible server).")
@click.option("--attempts", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Answers the model may give before a correct kernel (each rejected one goes back with its reason).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="The directory to write (default: ./NAME).")
@click.option("--language", type=click.Choice(["c", "cuda"]), default="c", show_default=True)
@click.option("--dtype", help="Element type of every tensor (default: float32 for c, bfloat16 for cuda).")
def new(name: str, module_path: Path, seed_kernel: Path | None, model: str | None, api_base: str | None, attempts: int,
        output: Path | None, language: str, dtype: str | None) -> None:
    """Write task NAME from a module file: ABI header, task.py (the module's forward is the reference, PyTorch
    eager a speed reference), scenarios scaled from get_inputs(), a first kernel (yours, or a model's, checked on
    the task's quick scenarios) as its original, and a config. Without either, the task has no original: a
    search writes its first kernel (the first-kernel operator)."""
    from evokernel.harness import LANGUAGES
    from evokernel.harness.task_from_module import write_task

    if seed_kernel is not None and model is not None:
        raise BadInput("give one first kernel: --seed-kernel FILE (yours) or --model MODEL (a model writes it)")
    if api_base and not model:
        raise BadInput("--api-base needs --model")
    extension = LANGUAGES[language].extension
    if seed_kernel is not None:
        if not seed_kernel.is_file():
            raise BadInput(f"--seed-kernel {seed_kernel}: file not found")
        if seed_kernel.suffix != extension:
            raise BadInput(f"--seed-kernel {seed_kernel}: a {language} kernel ends in {extension}")
        first_kernel = _given_kernel(seed_kernel)
    else:
        first_kernel = _model_kernel(model, api_base, attempts) if model else None
    if first_kernel is not None:
        first_kernel = _on_this_machine(first_kernel, language, "--seed-kernel" if seed_kernel else "--model")
    directory = write_task(name, module_path, output or Path(name), language,
                           dtype or ("float32" if language == "c" else "bfloat16"), first_kernel)
    next_steps = (f"evokernel check {directory}/original{extension} --task {directory} --baselines\n  "
                  f"evokernel run {directory}/config.yaml" if first_kernel else
                  f"no original kernel: a model writes the first one in a search\n  "
                  f"evokernel run {directory}/config.yaml --model MODEL   (or --seed-kernel FILE: yours)")
    console.print(f"wrote task {name} to {directory}/\n  {next_steps}", soft_wrap=True, highlight=False)


def _on_this_machine(first_kernel, language: str, option: str):
    """`first_kernel`, once the task is known to be well formed, where this machine can check it (a CUDA task's
    first kernel runs on a CUDA GPU): before any model is asked."""
    from evokernel.evaluation import gpu_missing

    def where_it_can_run(task, module_source: str, check) -> str:
        if gpu_missing(task.backend):
            raise BadInput(f"--language {language}: the first kernel ({option}) is checked on a CUDA GPU, and this "
                           "machine has none (leave it out to write the task without an original, and check your "
                           "kernel on a GPU machine)")
        return first_kernel(task, module_source, check)

    return where_it_can_run


def _given_kernel(path: Path):
    from evokernel.errors import read_text

    source = read_text(path, "--seed-kernel")

    def first_kernel(task, module_source: str, check) -> str:
        problem = check(source)
        if problem is not None:
            raise BadInput(f"--seed-kernel {path}: {problem.splitlines()[0]}")
        return source

    return first_kernel


def _model_kernel(model: str, api_base: str | None, attempts: int):
    from evokernel.config import LLMConfig

    try:
        llm = LLMConfig(models=[{"model": model, "api_base": api_base}], retry_backoff_s=0)
    except ValueError as exc:
        raise BadInput(f"--model {model}: {str(exc).splitlines()[-1].strip()}") from None

    def first_kernel(task, module_source: str, check) -> str:
        from evokernel.mutations.first_kernel import write_first_kernel

        return write_first_kernel(task, module_source, llm, attempts, check,
                                  say=lambda line: console.print(f"[dim]first kernel, {line}[/]", soft_wrap=True))

    return first_kernel
