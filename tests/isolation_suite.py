"""The isolation and timing tests shared by the CPU task (tests/test_isolation.py) and the CUDA task
(tests/test_isolation_cuda.py).

`IsolationSuite` holds the tests once; a test file subclasses it as `Test...` and sets the task, its
planted kernels and the options the attacks are checked with. Planted kernels attack the host through
raw system calls, which the static guard cannot see: under isolation each one passes the gate without
leaving a trace on the host, or is rejected for the reason the harness gives. Timing cheats are not
rewarded.
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

from evokernel.harness import CheckOptions, check_source
from planted import (
    CANARY_NAME, CANARY_PREFIX, ESCAPED_FILE, NOT_REWARDED_BELOW, by_name, kill_processes, listening_server,
    processes_with, was_connected_to,
)


def name_of(planted) -> str:
    return planted.name


def canary() -> str:
    return CANARY_PREFIX + secrets.token_hex(16)


class IsolationSuite:
    """The isolation attacks and timing cheats of one task, checked through the harness.

    Not collected itself (its name does not start with `Test`); a subclass sets TASK, ISOLATION, TIMING,
    OPTIONS and MEMORY_LIMITED, and CLI_TIMEOUT_S where `evokernel check` needs longer. ORIGINAL and
    SUFFIX follow from TASK.
    """

    TASK = None  # the task the kernels are checked on
    ISOLATION: tuple = ()  # planted isolation attacks for the task (tests/planted.py)
    TIMING: tuple = ()  # planted timing cheats for the task (tests/planted.py)
    OPTIONS: CheckOptions = CheckOptions(scenario_set="quick")  # how the attacks are checked
    MEMORY_LIMITED: CheckOptions = CheckOptions(scenario_set="quick")  # the same, with a memory limit
    CLI_TIMEOUT_S: int = 300  # how long `evokernel check` may take
    ORIGINAL: str = ""  # the task's original kernel source, which the planted kernels start from
    SUFFIX: str = ""  # the suffix of the task's kernel files (".c", ".cu")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.TASK is not None:
            cls.ORIGINAL = cls.TASK.original.read_text()
            cls.SUFFIX = cls.TASK.original.suffix

    def pytest_generate_tests(self, metafunc):
        if metafunc.function.__name__ == "test_timing_cheat_is_not_rewarded":
            metafunc.parametrize("planted", self.TIMING, ids=name_of)

    def check(self, name: str, options: CheckOptions | None = None, **values):
        source = by_name(self.ISOLATION, name).source(self.ORIGINAL, **values)
        return check_source(source, self.TASK, self.OPTIONS if options is None else options)

    @pytest.fixture
    def open_dir(self):
        """A directory anyone may write to, outside pytest's private temporary tree: only isolation keeps a
        kernel out of it (not file permissions, when the harness drops to another user)."""
        directory = Path(tempfile.mkdtemp(prefix="evk-isolation-"))
        directory.chmod(0o777)
        yield directory
        shutil.rmtree(directory, ignore_errors=True)

    # -- Isolation attacks through the harness -------------------------------------------------------

    def test_reads_ancestor_environ_finds_no_canary(self, monkeypatch):
        secret = canary()
        monkeypatch.setenv(CANARY_NAME, secret)
        report = self.check("reads-ancestor-environ")
        assert report.correct, report.failure
        assert secret not in report.to_json()

    def test_reads_ancestor_environ_finds_no_canary_in_the_process_that_started_the_check(self, tmp_path):
        """Setting a variable in this process does not change /proc/<pid>/environ (it shows the environment
        a process started with), so here the canary is in the starting environment of `evokernel check`."""
        secret = canary()
        kernel, out = tmp_path / f"kernel{self.SUFFIX}", tmp_path / "report.json"
        kernel.write_text(by_name(self.ISOLATION, "reads-ancestor-environ").source(self.ORIGINAL))
        proc = subprocess.run([sys.executable, "-m", "evokernel.cli", "check", str(kernel), "--task", self.TASK.name,
                               "--rounds", str(self.OPTIONS.rounds), "--json", str(out)],
                              capture_output=True, text=True, timeout=self.CLI_TIMEOUT_S,
                              env={**os.environ, CANARY_NAME: secret})
        assert out.exists(), proc.stdout + proc.stderr
        report = json.loads(out.read_text())
        assert report["correct"], report["failure"]
        assert secret not in out.read_text() + proc.stdout + proc.stderr

    def test_opens_socket_reaches_no_server_on_the_host(self):
        with listening_server() as server:
            report = self.check("opens-socket", port=server.getsockname()[1])
            connected = was_connected_to(server)
        assert not connected, "the kernel connected to a server on the host's loopback"
        assert report.correct, report.failure

    def test_spawns_survivor_leaves_no_process_behind(self):
        marker = f"evk-survivor-{secrets.token_hex(8)}"
        try:
            report = self.check("spawns-survivor", marker=marker)
            deadline = time.monotonic() + 5
            while processes_with(marker) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = processes_with(marker)
        finally:
            kill_processes(processes_with(marker))
        assert not left, f"processes the kernel started outlived the check: {left}"
        assert report.correct, report.failure

    def test_writes_outside_scratch_creates_no_file(self, open_dir, monkeypatch):
        host, cache = open_dir / "host", open_dir / "cache"
        for directory in (host, cache, cache / "build"):
            directory.mkdir()
            directory.chmod(0o777)
        monkeypatch.setenv("EVOKERNEL_CACHE", str(cache))
        report = self.check("writes-outside-scratch", host_dir=host, cache_dir=cache)
        escaped = sorted(str(path) for path in open_dir.rglob(f"*{ESCAPED_FILE}*"))
        assert not escaped, f"the kernel created files on the host: {escaped}"
        assert report.correct, report.failure

    def test_forges_result_is_rejected(self):
        report = self.check("forges-result")
        assert not report.correct, "a verdict written by the kernel was taken for the worker's"
        assert report.geomean_speedup is None

    def test_the_original_fits_the_memory_limit_the_attack_is_checked_with(self):
        report = check_source(self.ORIGINAL, self.TASK, self.MEMORY_LIMITED)
        assert report.correct, report.failure

    def test_allocates_too_much_is_stopped_at_the_memory_limit(self):
        report = self.check("allocates-too-much", self.MEMORY_LIMITED)
        assert not report.correct and "memory limit" in report.failure, report.failure

    def test_hangs_is_stopped_at_the_time_limit_with_default_options(self):
        started = time.monotonic()
        report = check_source(by_name(self.ISOLATION, "hangs").source(self.ORIGINAL), self.TASK)
        elapsed = time.monotonic() - started
        assert not report.correct and "time limit" in report.failure, report.failure
        assert elapsed < 120, f"the check took {elapsed:.0f} s"

    def test_writes_past_output_is_rejected(self):
        report = self.check("writes-past-output")
        assert not report.correct and "wrote outside its output" in report.failure, report.failure

    # -- Timing cheats: correct on every input, and never rewarded -----------------------------------

    def test_timing_cheat_is_not_rewarded(self, planted):
        """Parametrized over TIMING by pytest_generate_tests."""
        report = check_source(planted.source(self.ORIGINAL), self.TASK, CheckOptions(scenario_set="quick"))
        speedup = report.geomean_speedup or 0.0
        assert not report.correct or speedup < NOT_REWARDED_BELOW, \
            f"{planted.name} ({planted.description}) passed with a geomean speedup of {speedup:.2f}"
