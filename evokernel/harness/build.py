"""Build a single-file candidate into a shared object: no torch headers, cached by content hash.

Compilers run with a time limit and an environment without secrets; their output is kept
(trimmed) so that a repair prompt can show it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from evokernel.harness.sandbox import SCRATCH, run_isolated

LOG_LIMIT = 6000
# Where a candidate's source sits while it is compiled: SCRATCH in the sandbox, a build-cache
# directory without one (older logs); compiler messages name it instead of the user's file.
_SOURCE_PATH = re.compile(r"(?:/evk/scratch|[^\s:'\"`]*/build/[0-9a-f]{24}\.tmp\d+)/kernel\.(?:cu|c)\b")


@dataclass
class BuildResult:
    ok: bool
    library: Path | None
    log: str
    seconds: float
    cached: bool = False


def cache_root() -> Path:
    return Path(os.environ.get("EVOKERNEL_CACHE", Path.home() / ".cache" / "evokernel")) / "build"


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


def cuda_library_dirs() -> list[str]:
    """The CUDA toolkit's library folders, found from where `nvcc` is (none when it is missing)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return []
    root = Path(nvcc).resolve().parent.parent
    machine = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}.get(platform.machine(), platform.machine() + "-linux")
    targets = root / "targets" / machine / "lib"
    return [str(root / "lib64"), *([str(targets)] if targets.is_dir() else [])]


def compile_command(language: str, source: Path, include_dir: Path, output: Path) -> list[str]:
    if language == "cuda":
        # The shared runtime, so that the object's undefined symbols are the kernel's own imports
        # (guard.check_shared_object reads them; the static runtime brings dlopen, open...), and an
        # rpath to the toolkit's runtime so that the object loads without LD_LIBRARY_PATH.
        rpath = [arg for folder in cuda_library_dirs() for arg in ("-Xlinker", f"-rpath={folder}")]
        return ["nvcc", "-O3", "-std=c++17", *cuda_arch_flags(), "-Xptxas", "-v", "-lineinfo",
                "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", *rpath,
                "-I", str(include_dir), "-o", str(output), str(source)]
    if language == "c":
        compiler = os.environ.get("CC", "gcc")
        return [compiler, "-O3", "-march=native", "-fopenmp", "-std=c11", "-shared", "-fPIC", "-Wall",
                "-I", str(include_dir), "-o", str(output), str(source)]
    raise ValueError(f"no compiler for language {language!r}")


def toolchain_dirs(compiler: str) -> list[Path]:
    """The installation a compiler lives in (e.g. /usr/local/cuda-13.0 for nvcc), readable in the sandbox."""
    found = shutil.which(compiler)
    return [Path(found).resolve().parents[1]] if found else []


def _trim(log: str) -> str:
    if len(log) <= LOG_LIMIT:
        return log
    half = LOG_LIMIT // 2
    return log[:half] + "\n... [trimmed] ...\n" + log[-half:]


def show_source_paths(text: str | None, name: str) -> str | None:
    """`text` (a compiler message) with the build's path of the source replaced by `name`."""
    return None if text is None else _SOURCE_PATH.sub(lambda _: name, text)


def first_error_lines(log: str, lines: int = 8) -> list[str]:
    """The compiler's first error and the lines that follow it (the offending source line, the caret)."""
    all_lines = log.splitlines()
    start = next((n for n, line in enumerate(all_lines) if re.search(r"\berror\b", line, re.IGNORECASE)), None)
    return [] if start is None else all_lines[start:start + lines]


def build(source: str, language: str, header: Path, timeout_s: float = 180.0) -> BuildResult:
    """Compile `source` (text) against the task's ABI header; reuse an earlier build of the same input."""
    suffix = ".cu" if language == "cuda" else ".c"
    probe = compile_command(language, Path("kernel" + suffix), header.parent, Path("kernel.so"))
    key = hashlib.sha256("\0".join([source, header.read_text(), *probe]).encode()).hexdigest()[:24]
    directory = cache_root() / key
    library = directory / "kernel.so"
    log_file = directory / "build.log"
    if library.exists():
        return BuildResult(True, library, log_file.read_text() if log_file.exists() else "", 0.0, cached=True)
    scratch = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    (scratch / ("kernel" + suffix)).write_text(source)
    command = compile_command(language, SCRATCH / ("kernel" + suffix), header.parent, SCRATCH / "kernel.so")
    start = time.perf_counter()
    try:
        if shutil.which(command[0]) is None:
            raise FileNotFoundError(command[0])
        proc = run_isolated(command, scratch, [header.parent, *toolchain_dirs(command[0])], timeout_s)
        log, ok = _trim((proc.stdout + proc.stderr).strip()), proc.returncode == 0
        log = log.replace(str(scratch), str(SCRATCH))  # the same log with or without the sandbox
    except subprocess.TimeoutExpired:
        log, ok = f"compile timed out after {timeout_s:.0f} s", False
    except FileNotFoundError:
        log, ok = f"compiler '{command[0]}' not found on this machine", False
    seconds = time.perf_counter() - start
    (scratch / "build.log").write_text(log)
    if not ok:
        shutil.rmtree(scratch, ignore_errors=True)
        return BuildResult(False, None, log, seconds)
    try:
        scratch.rename(directory)
    except OSError:  # another process built the same source meanwhile
        shutil.rmtree(scratch, ignore_errors=True)
    return BuildResult(True, library, log, seconds)
