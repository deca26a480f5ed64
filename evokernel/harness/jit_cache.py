"""The CUDA driver's cache of code it compiled from PTX, kept across workers for the library speed references.

cuDNN compiles its attention kernels from PTX at a shape's first call in a process (0.4-1.6 s a shape on the
H200, 4-6 s for the six `fa3-2k` shapes). Every candidate runs in a new worker process, so without a cache
each check that times against cuDNN paid that again inside its timing. The driver keeps such code in the
directory `CUDA_CACHE_PATH` names, but only in one it can write: a read-only directory is not used at all.

So a worker gets a private copy of a master cache (`copy_into`), and whatever it writes there ends with it.
The master is written only by `publish`, from a warmer (`supervisor.warm_jit_cache`): a worker that runs the
task's own library code on the scenarios and never receives a candidate. A candidate therefore cannot plant
code that the speed reference would run in a later check.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from evokernel.harness.build import cache_home, held

VARIABLE = "CUDA_CACHE_PATH"  # the driver's setting for where its cache is
DIRECTORY = "cuda-jit"  # the master under the harness cache, and each worker's copy in its scratch


def master() -> Path:
    return cache_home() / DIRECTORY


def _lock() -> Path:
    return cache_home() / f"{DIRECTORY}.lock"


def copy_into(directory: Path) -> None:
    """`directory` made a private copy of the master (empty while there is none); never a link to it."""
    with held(_lock(), shared=True):  # a publish in progress is never copied half-done
        if master().is_dir():
            shutil.copytree(master(), directory, symlinks=False, dirs_exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)


def publish(directory: Path) -> None:
    """A warmer's cache merged into the master, under the lock that copies take too."""
    with held(_lock()):
        shutil.copytree(directory, master(), symlinks=False, dirs_exist_ok=True)
