"""Isolation and timing on the CPU task.

Planted kernels attack the host through raw system calls, which the static guard cannot see: under
isolation each one passes the gate without leaving a trace on the host, or is rejected for the reason
the harness gives. Timing cheats are not rewarded. A secret in the environment of the processes that
start a check or a run never reaches a kernel.

The compile and guard tests need no harness run: `pytest tests/test_isolation.py -k "compile or guard"`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evokernel.harness import object_imports
from evokernel.harness import CheckOptions, get_task, guard
from evokernel.store import Store
from isolation_suite import IsolationSuite, canary, name_of
from planted import CANARY_NAME, CPU_ISOLATION, CPU_TIMING, CUDA_ISOLATION, CUDA_TIMING, by_name

TASK = get_task("attention-fwd-cpu")
CUDA_TASK = get_task("attention-fwd")
ORIGINAL = TASK.original.read_text()
CUDA_ORIGINAL = CUDA_TASK.original.read_text()
PLANTED = CPU_ISOLATION + CPU_TIMING
CUDA_PLANTED = CUDA_ISOLATION + CUDA_TIMING


# -- Without the harness: every planted source builds and gets past the static guard -----------------

def compile_c(source: str, directory: Path) -> tuple[subprocess.CompletedProcess, Path]:
    (directory / "kernel.c").write_text(source)
    library = directory / "kernel.so"
    proc = subprocess.run(["gcc", "-O3", "-fopenmp", "-std=c11", "-shared", "-fPIC", "-Wall",
                           "-I", str(TASK.header.parent), "-o", str(library), str(directory / "kernel.c")],
                          capture_output=True, text=True, timeout=120)
    return proc, library


@pytest.mark.parametrize("planted", PLANTED, ids=name_of)
def test_cpu_source_compiles_without_warnings(planted, tmp_path):
    proc, library = compile_c(planted.source(ORIGINAL), tmp_path)
    assert proc.returncode == 0 and library.exists(), proc.stderr
    assert "warning" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("planted", PLANTED, ids=name_of)
def test_cpu_source_passes_the_static_guard(planted):
    assert guard.check_source(planted.source(ORIGINAL), "c", TASK.header_file, TASK.entry) is None


@pytest.mark.parametrize("planted", PLANTED, ids=name_of)
def test_cpu_object_passes_the_import_guard(planted, tmp_path):
    proc, library = compile_c(planted.source(ORIGINAL), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert object_imports.check_shared_object(library) is None


@pytest.mark.parametrize("planted", CUDA_PLANTED, ids=name_of)
def test_cuda_source_passes_the_static_guard(planted):
    assert guard.check_source(planted.source(CUDA_ORIGINAL), "cuda", CUDA_TASK.header_file, CUDA_TASK.entry) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (no GPU needed)")
@pytest.mark.parametrize("planted", CUDA_PLANTED, ids=name_of)
def test_cuda_source_compiles_and_passes_the_import_guard(planted, tmp_path):
    (tmp_path / "kernel.cu").write_text(planted.source(CUDA_ORIGINAL))
    library = tmp_path / "kernel.so"
    proc = subprocess.run(["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared",
                           "-Xcompiler", "-fPIC,-Wall", "-cudart", "shared", "-I", str(CUDA_TASK.header.parent),
                           "-o", str(library), str(tmp_path / "kernel.cu")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and library.exists(), proc.stdout + proc.stderr
    assert "warning" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert object_imports.check_shared_object(library) is None


# -- Isolation attacks and timing cheats through the harness (tests/isolation_suite.py) --------------

class TestCpuIsolation(IsolationSuite):
    TASK = TASK
    ISOLATION = CPU_ISOLATION
    TIMING = CPU_TIMING
    OPTIONS = CheckOptions(scenario_set="quick", rounds=3)
    MEMORY_LIMITED = CheckOptions(scenario_set="quick", rounds=3, memory_limit_gb=1.0)


# -- A run: the canary in the environment of `evokernel run` never reaches a kernel -----------------

def test_canary_never_reaches_a_kernel_in_a_run(tmp_path):
    secret = canary()
    seed = tmp_path / "seed.c"
    seed.write_text(by_name(CPU_ISOLATION, "reads-ancestor-environ").source(ORIGINAL))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "task": TASK.name, "scenarios": "quick", "trials": 1, "population_size": 2, "seeds": [str(seed)],
        "budget": {"evaluations": 1}, "resources": {"max_parallel": 1, "evaluation_timeout_s": 120},
        "random_seed": 7}))
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "evokernel.cli", "run", str(config), "--runs-dir", str(runs)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, CANARY_NAME: secret, "COLUMNS": "200"})
    assert runs.is_dir(), proc.stdout + proc.stderr
    (run_dir,) = runs.iterdir()
    with Store(run_dir, readonly=True) as store:
        (seed_row,) = [row for row in store.individuals() if row.operator == "seed"]
    # The seed zeroes its output once it finds the canary: passing means no kernel saw it.
    assert seed_row.status == "correct", seed_row.failure
    assert secret not in proc.stdout + proc.stderr
    leaked = [str(path) for path in run_dir.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
    assert not leaked, f"the canary is in {leaked}"


def test_a_compiler_outside_the_system_folders_is_readable_by_the_worker(tmp_path, monkeypatch):
    """torch.compile's code and Triton's launchers are compiled in the worker: a C compiler installed under
    e.g. /opt/gcc must be bound into its sandbox (read-only); one under /usr already is."""
    from evokernel.harness.sandbox import library_toolchains

    compiler = tmp_path / "gcc-install" / "bin" / "gcc"
    compiler.parent.mkdir(parents=True)
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv("CXX", "/usr/bin/env")
    assert library_toolchains() == [tmp_path / "gcc-install"]
