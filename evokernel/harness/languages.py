"""Languages kernels are written in: one table of what differs between them (file extension, compiler
and flags, the backend that runs the built object, how its entry point is called)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable


@lru_cache(maxsize=None)
def cuda_arch_flags() -> tuple[str, ...]:
    """Target the GPU that is present (sm_90a on Hopper, for wgmma and setmaxnreg)."""
    arch = os.environ.get("EVOKERNEL_CUDA_ARCH")
    if not arch:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=False).stdout
            arch = out.split()[0].replace(".", "") if out.strip() else "90"
        except (OSError, subprocess.TimeoutExpired):
            arch = "90"
        arch = arch + "a" if arch in ("90", "100", "120") else arch
    return (f"-gencode=arch=compute_{arch},code=sm_{arch}",)


def cuda_root() -> Path | None:
    """The CUDA toolkit's folder: CUDA_HOME or CUDA_PATH where set, else where `nvcc` lies; where that `nvcc`
    is a wrapper script outside the toolkit (no `include/cuda_runtime.h` beside it), the folder nvcc itself
    reports (`_HERE_` of a dry run). None without nvcc."""
    return _toolkit(shutil.which("nvcc"), os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"))


@lru_cache(maxsize=8)
def _toolkit(nvcc: str | None, *homes: str | None) -> Path | None:
    """`cuda_root` for this `nvcc` and these variables (a dry run of a wrapper once, not at every build)."""
    for home in homes:
        if home and (Path(home) / "include" / "cuda_runtime.h").is_file():
            return Path(home)
    if not nvcc:
        return None
    root = Path(nvcc).resolve().parent.parent
    if (root / "include" / "cuda_runtime.h").is_file():
        return root
    try:
        dry_run = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                                 capture_output=True, text=True, timeout=60, check=False).stderr
    except (OSError, subprocess.TimeoutExpired):
        return root
    here = next((line.split("=", 1)[1].strip() for line in dry_run.splitlines() if line.startswith("#$ _HERE_=")),
                None)
    return Path(here).resolve().parent if here else root


def cuda_library_dirs() -> list[str]:
    """The CUDA toolkit's library folders (none without nvcc)."""
    root = cuda_root()
    if root is None:
        return []
    machine = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}.get(platform.machine(), platform.machine() + "-linux")
    targets = root / "targets" / machine / "lib"
    return [str(root / "lib64"), *([str(targets)] if targets.is_dir() else [])]


def _nvcc_command(source: Path, include_dir: Path, output: Path) -> list[str]:
    # The shared runtime, so that the object's undefined symbols are the kernel's own imports
        # (object_imports.check_shared_object reads them; the static runtime brings dlopen, open...), and an
        # rpath to the toolkit's runtime so that the object loads without LD_LIBRARY_PATH.
    rpath = [arg for folder in cuda_library_dirs() for arg in ("-Xlinker", f"-rpath={folder}")]
    return ["nvcc", "-O3", "-std=c++17", *cuda_arch_flags(), "-Xptxas", "-v", "-lineinfo",
            "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", *rpath,
            "-I", str(include_dir), "-o", str(output), str(source)]


def _cc_command(source: Path, include_dir: Path, output: Path) -> list[str]:
    return [os.environ.get("CC", "gcc"), "-O3", "-march=native", "-fopenmp", "-std=c11", "-shared", "-fPIC",
            "-Wall", "-I", str(include_dir), "-o", str(output), str(source), "-lm"]


@dataclass(frozen=True)
class Language:
    name: str
    extension: str  # of a kernel source file
    fence: str  # the code fence a prompt shows its sources in
    backend: str  # module in evokernel.harness.backends that loads, feeds and times the built object
    compile_command: Callable[[Path, Path, Path], list[str]]  # (source, include folder, output object)
    stream_argument: bool  # the entry takes the harness's stream after the parameter struct


LANGUAGES = {
    "c": Language("c", ".c", "c", "cpu", _cc_command, stream_argument=False),
    "cuda": Language("cuda", ".cu", "cuda", "cuda", _nvcc_command, stream_argument=True),
}
