"""Isolation and timing on the CPU task.

Planted kernels attack the host through raw system calls, which the static guard cannot see: under
isolation each one passes the gate without leaving a trace on the host, or is rejected for the reason
the harness gives. Timing cheats are not rewarded. A secret in the environment of the processes that
start a check or a run never reaches a kernel.

The compile and guard tests need no harness run: `pytest tests/test_isolation.py -k "compile or guard"`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from evokernel.harness import CheckOptions, check_source, get_task, guard
from evokernel.store import Store
from planted import (
    CANARY_NAME, CANARY_PREFIX, CPU_ISOLATION, CPU_TIMING, CUDA_ISOLATION, CUDA_TIMING, ESCAPED_FILE,
    NOT_REWARDED_BELOW, by_name, kill_processes, listening_server, processes_with, was_connected_to,
)

TASK = get_task("attention-fwd-cpu")
CUDA_TASK = get_task("attention-fwd")
ORIGINAL = TASK.original.read_text()
CUDA_ORIGINAL = CUDA_TASK.original.read_text()
QUICK = CheckOptions(scenario_set="quick", rounds=3)
PLANTED = CPU_ISOLATION + CPU_TIMING
CUDA_PLANTED = CUDA_ISOLATION + CUDA_TIMING


def name_of(planted) -> str:
    return planted.name


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
    assert guard.check_source(planted.source(ORIGINAL), "c", TASK.header.name) is None


@pytest.mark.parametrize("planted", PLANTED, ids=name_of)
def test_cpu_object_passes_the_import_guard(planted, tmp_path):
    proc, library = compile_c(planted.source(ORIGINAL), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert guard.check_shared_object(library) is None


@pytest.mark.parametrize("planted", CUDA_PLANTED, ids=name_of)
def test_cuda_source_passes_the_static_guard(planted):
    assert guard.check_source(planted.source(CUDA_ORIGINAL), "cuda", CUDA_TASK.header.name) is None


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
    assert guard.check_shared_object(library) is None


# -- Isolation attacks through the harness -----------------------------------------------------------

def check(name: str, options: CheckOptions = QUICK, **values):
    return check_source(by_name(CPU_ISOLATION, name).source(ORIGINAL, **values), TASK, options)


def canary() -> str:
    return CANARY_PREFIX + secrets.token_hex(16)


@pytest.fixture
def open_dir():
    """A directory anyone may write to, outside pytest's private temporary tree: only isolation keeps a
    kernel out of it (not file permissions, when the harness drops to another user)."""
    directory = Path(tempfile.mkdtemp(prefix="evk-isolation-"))
    directory.chmod(0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_reads_ancestor_environ_finds_no_canary(monkeypatch):
    secret = canary()
    monkeypatch.setenv(CANARY_NAME, secret)
    report = check("reads-ancestor-environ")
    assert report.correct, report.failure
    assert secret not in report.to_json()


def test_reads_ancestor_environ_finds_no_canary_in_the_process_that_started_the_check(tmp_path):
    """Setting a variable in this process does not change /proc/<pid>/environ (it shows the environment
    a process started with), so here the canary is in the starting environment of `evokernel check`."""
    secret = canary()
    kernel, out = tmp_path / "kernel.c", tmp_path / "report.json"
    kernel.write_text(by_name(CPU_ISOLATION, "reads-ancestor-environ").source(ORIGINAL))
    proc = subprocess.run([sys.executable, "-m", "evokernel.cli", "check", str(kernel), "--task", TASK.name,
                           "--rounds", "3", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, CANARY_NAME: secret})
    assert out.exists(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["correct"], report["failure"]
    assert secret not in out.read_text() + proc.stdout + proc.stderr


def test_opens_socket_reaches_no_server_on_the_host():
    with listening_server() as server:
        report = check("opens-socket", port=server.getsockname()[1])
        connected = was_connected_to(server)
    assert not connected, "the kernel connected to a server on the host's loopback"
    assert report.correct, report.failure


def test_spawns_survivor_leaves_no_process_behind():
    marker = f"evk-survivor-{secrets.token_hex(8)}"
    try:
        report = check("spawns-survivor", marker=marker)
        deadline = time.monotonic() + 5
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = processes_with(marker)
    finally:
        kill_processes(processes_with(marker))
    assert not left, f"processes the kernel started outlived the check: {left}"
    assert report.correct, report.failure


def test_writes_outside_scratch_creates_no_file(open_dir, monkeypatch):
    host, cache = open_dir / "host", open_dir / "cache"
    for directory in (host, cache, cache / "build"):
        directory.mkdir()
        directory.chmod(0o777)
    monkeypatch.setenv("EVOKERNEL_CACHE", str(cache))
    report = check("writes-outside-scratch", host_dir=host, cache_dir=cache)
    escaped = sorted(str(path) for path in open_dir.rglob(f"*{ESCAPED_FILE}*"))
    assert not escaped, f"the kernel created files on the host: {escaped}"
    assert report.correct, report.failure


def test_forges_result_is_rejected():
    report = check("forges-result")
    assert not report.correct, "a verdict written by the kernel was taken for the worker's"
    assert report.geomean_speedup is None


MEMORY_LIMITED = CheckOptions(scenario_set="quick", rounds=3, memory_limit_gb=1.0)


def test_the_original_fits_the_memory_limit_the_attack_is_checked_with():
    report = check_source(ORIGINAL, TASK, MEMORY_LIMITED)
    assert report.correct, report.failure


def test_allocates_too_much_is_stopped_at_the_memory_limit():
    report = check("allocates-too-much", MEMORY_LIMITED)
    assert not report.correct and "memory limit" in report.failure, report.failure


def test_hangs_is_stopped_at_the_time_limit_with_default_options():
    started = time.monotonic()
    report = check_source(by_name(CPU_ISOLATION, "hangs").source(ORIGINAL), TASK)
    elapsed = time.monotonic() - started
    assert not report.correct and "time limit" in report.failure, report.failure
    assert elapsed < 120, f"the check took {elapsed:.0f} s"


def test_writes_past_output_is_rejected():
    report = check("writes-past-output")
    assert not report.correct and "wrote outside its output" in report.failure, report.failure


# -- Timing cheats: correct on every input, and never rewarded ---------------------------------------

@pytest.mark.parametrize("planted", CPU_TIMING, ids=name_of)
def test_timing_cheat_is_not_rewarded(planted):
    report = check_source(planted.source(ORIGINAL), TASK, CheckOptions(scenario_set="quick"))
    speedup = report.geomean_speedup or 0.0
    assert not report.correct or speedup < NOT_REWARDED_BELOW, \
        f"{planted.name} ({planted.description}) passed with a geomean speedup of {speedup:.2f}"


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
