"""Isolation and timing on the CUDA task (run on a GPU machine; skipped elsewhere).

The same host-side attacks as on the CPU task (tests/test_isolation.py), from the host code of a
CUDA kernel; the timing cheats decide on the device, since host synchronisation is forbidden. Their
sources are compiled and guarded without a GPU in tests/test_isolation.py.
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

from evokernel.harness import CheckOptions, check_source, get_task
from planted import (
    CANARY_NAME, CANARY_PREFIX, CUDA_ISOLATION, CUDA_TIMING, ESCAPED_FILE, NOT_REWARDED_BELOW, by_name,
    kill_processes, listening_server, processes_with, was_connected_to,
)

pytestmark = pytest.mark.gpu

TASK = get_task("attention-fwd")
ORIGINAL = TASK.original.read_text()
QUICK = CheckOptions(scenario_set="quick", rounds=5)
# The CUDA worker holds PyTorch and a device context, so its limit is above the CPU task's 1 GiB; the
# attack touches 3 GiB on top of that.
MEMORY_LIMITED = CheckOptions(scenario_set="quick", rounds=5, memory_limit_gb=3.0)


def check(name: str, options: CheckOptions = QUICK, **values):
    return check_source(by_name(CUDA_ISOLATION, name).source(ORIGINAL, **values), TASK, options)


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
    """The canary in the starting environment of `evokernel check` (see the CPU test of the same name)."""
    secret = canary()
    kernel, out = tmp_path / "kernel.cu", tmp_path / "report.json"
    kernel.write_text(by_name(CUDA_ISOLATION, "reads-ancestor-environ").source(ORIGINAL))
    proc = subprocess.run([sys.executable, "-m", "evokernel.cli", "check", str(kernel), "--task", TASK.name,
                           "--rounds", "5", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, CANARY_NAME: secret})
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


def test_the_original_fits_the_memory_limit_the_attack_is_checked_with():
    report = check_source(ORIGINAL, TASK, MEMORY_LIMITED)
    assert report.correct, report.failure


def test_allocates_too_much_is_stopped_at_the_memory_limit():
    report = check("allocates-too-much", MEMORY_LIMITED)
    assert not report.correct and "memory limit" in report.failure, report.failure


def test_hangs_is_stopped_at_the_time_limit_with_default_options():
    started = time.monotonic()
    report = check_source(by_name(CUDA_ISOLATION, "hangs").source(ORIGINAL), TASK)
    elapsed = time.monotonic() - started
    assert not report.correct and "time limit" in report.failure, report.failure
    assert elapsed < 120, f"the check took {elapsed:.0f} s"


def test_writes_past_output_is_rejected():
    report = check("writes-past-output")
    assert not report.correct and "wrote outside its output" in report.failure, report.failure


@pytest.mark.parametrize("planted", CUDA_TIMING, ids=lambda p: p.name)
def test_timing_cheat_is_not_rewarded(planted):
    report = check_source(planted.source(ORIGINAL), TASK, CheckOptions(scenario_set="quick"))
    speedup = report.geomean_speedup or 0.0
    assert not report.correct or speedup < NOT_REWARDED_BELOW, \
        f"{planted.name} ({planted.description}) passed with a geomean speedup of {speedup:.2f}"
