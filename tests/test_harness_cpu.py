"""The harness on the CPU task: the original passes, every planted cheat is rejected for its reason,
bad kernels (crash, hang, compile error) are rejected without killing the harness."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from evokernel.harness import CheckOptions, check_kernel, check_source, get_task
from evokernel.harness.build import cache_home
from evokernel.harness.protocol import CheckRequest
from evokernel.harness.runner import build_runner
from evokernel.harness.sandbox import clean_environment
from planted import CPU_CHEATS

TASK = get_task("attention-fwd-cpu")
ORIGINAL = TASK.original.read_text()
QUICK = CheckOptions(scenario_set="quick", rounds=3)


def test_original_passes_every_scenario_with_speedup_near_one():
    report = check_kernel(TASK.original, TASK, CheckOptions(scenario_set="all", rounds=5))
    assert report.correct, report.failure
    assert len(report.scenarios) == len(TASK.scenarios("all"))
    assert all(s.correct and s.time_ms > 0 and s.max_err <= s.tolerance for s in report.scenarios)
    assert 0.7 < report.geomean_speedup < 1.4


def test_slow_but_correct_kernel_passes():
    slow = ORIGINAL.replace("#define BLOCK_Q 4 ", "#define BLOCK_Q 1 ").replace("#define BLOCK_K 8 ", "#define BLOCK_K 4 ")
    assert slow != ORIGINAL
    report = check_source(slow, TASK, QUICK)
    assert report.correct, report.failure
    assert report.geomean_speedup is not None


@pytest.mark.parametrize("cheat", CPU_CHEATS, ids=lambda c: c.name)
def test_planted_cheat_is_rejected(cheat):
    report = check_source(cheat.edit(ORIGINAL), TASK, QUICK)
    if cheat.may_gain_nothing and report.correct:
        assert report.geomean_speedup < 1.25, f"{cheat.name} ({cheat.design_item}) gained {report.geomean_speedup}"
        return
    assert not report.correct, f"{cheat.name} ({cheat.design_item}) passed the gate"
    assert report.geomean_speedup is None
    assert cheat.expected in report.failure, report.failure


def test_rejection_names_the_scenario_and_check():
    report = check_source(CPU_CHEATS[1].edit(ORIGINAL), TASK, QUICK)
    first = TASK.scenarios("quick")[0].name
    assert report.failure.startswith(first) and "exceeds" in report.failure
    assert report.scenarios[0].correct is False and report.scenarios[0].error


def test_crashing_kernel_is_a_rejection_not_a_dead_harness():
    crash = ORIGINAL.replace("if (!p || !p->q", "if (((volatile int*)0)[0] == 1) return 9;\n  if (!p || !p->q")
    report = check_source(crash, TASK, QUICK)
    assert not report.correct and "crashed (SIGSEGV)" in report.failure and "verification" in report.failure


def test_hanging_kernel_is_killed_at_the_time_limit():
    hang = ORIGINAL.replace("if (!p || !p->q", "for (volatile int spin = 1; spin;) {}\n  if (!p || !p->q")
    report = check_source(hang, TASK, CheckOptions(scenario_set="quick", timeout_s=3))
    assert not report.correct and "timed out after 3 s" in report.failure


def test_compile_error_is_kept_for_repair():
    report = check_source(ORIGINAL.replace("return 0;\n}", "return 0\n}"), TASK, QUICK)
    assert not report.correct and "does not compile" in report.failure
    assert "error" in report.build_log


def test_worker_environment_has_no_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "x")
    env = clean_environment()
    assert "OPENAI_API_KEY" not in env and "ANTHROPIC_AUTH_TOKEN" not in env and "PATH" in env


def test_speed_reference_can_be_another_kernel(tmp_path):
    faster = ORIGINAL.replace("#define THREADS 1 ", "#define THREADS 0 ")
    (tmp_path / "ref.c").write_text(faster)
    report = check_source(ORIGINAL, TASK, CheckOptions(scenario_set="quick", rounds=3,
                                                       speed_reference=str(tmp_path / "ref.c")))
    assert report.correct and report.speed_reference.endswith("ref.c")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evokernel.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})


def test_cli_check_table_json_and_exit_codes(tmp_path):
    out = tmp_path / "report.json"
    proc = run_cli("check", str(TASK.original), "--task", TASK.name, "--json", str(out), "--rounds", "3")
    assert proc.returncode == 0, proc.stderr
    assert "geomean speedup" in proc.stdout
    report = json.loads(out.read_text())
    assert report["task"] == TASK.name and report["correct"] is True and report["failure"] is None
    assert isinstance(report["geomean_speedup"], float)
    keys = {"name", "correct", "rel_err", "time_ms", "original_time_ms", "speedup", "error"}
    assert keys <= set(report["scenarios"][0])

    proc = run_cli("check", str(TASK.original), "--task", TASK.name, "--scenarios", "all", "--no-time",
                   "--json", str(out))
    assert proc.returncode == 0 and "(not timed)" in proc.stdout
    report = json.loads(out.read_text())
    assert report["correct"] and report["geomean_speedup"] is None and report["scenarios"][0]["time_ms"] is None

    bad = tmp_path / "bad.c"
    bad.write_text(CPU_CHEATS[0].edit(ORIGINAL))
    proc = run_cli("check", str(bad), "--task", TASK.name, "--json", str(out))
    assert proc.returncode == 1 and "rejected" in proc.stdout
    assert json.loads(out.read_text())["correct"] is False


@pytest.mark.parametrize("args, message", [
    (["check", "missing.c", "--task", "attention-fwd-cpu"], "kernel file not found"),
    (["check", "{original}", "--task", "nope"], "unknown task 'nope'"),
    (["check", "{original}", "--task", "attention-fwd-cpu", "--scenarios", "huge"], "no scenario set 'huge'"),
    (["check", "{original}", "--task", "attention-fwd-cpu", "--original", "cudnn"], "--original: 'cudnn' is neither a baseline of task attention-fwd-cpu"),
    (["check", "{original}", "--task", "attention-fwd-cpu", "--trials", "0"], "--trials"),
    (["check", "{original}", "--task", "attention-fwd-cpu", "--baselines"], "no library baselines"),
])
def test_cli_bad_input_exits_2_with_one_line(args, message):
    proc = run_cli(*[a.format(original=TASK.original) for a in args])
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_worker_ends_itself_when_its_parent_is_gone(tmp_path):
    """A hanging kernel's worker exits on its own shortly after the limit (no orphan keeps running)."""
    import time

    from evokernel.harness.check import build_checked

    hang = ORIGINAL.replace("if (!p || !p->q", "for (volatile int spin = 1; spin;) {}\n  if (!p || !p->q")
    library = build_checked(hang, TASK, "candidate")[0].library
    original = build_checked(ORIGINAL, TASK, "original")[0].library
    for name, path in (("candidate", library), ("original", original)):
        shutil.copyfile(path, tmp_path / f"{name}.so")
    shutil.copyfile(build_runner(cache_home()), tmp_path / "evk-runner")
    (tmp_path / "evk-runner").chmod(0o755)
    read_end, write_end = os.pipe()  # the harness channel, which nobody reads here
    request = CheckRequest(backend="cpu", task=str(TASK.directory), library=str(tmp_path), speed_reference="original",
                           scenarios=[vars(TASK.scenarios("quick")[0])], seed=1, trials=1, rounds=1, warmup=0,
                           floors_ms=[0.0], min_limit_s=1.0, self_destruct_s=2)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "evokernel.harness.worker", "cpu", str(TASK.directory), str(write_end)],
                          input=request.to_json().encode(),
                          timeout=60, pass_fds=(write_end,))
    os.close(read_end)
    os.close(write_end)
    assert proc.returncode == -14  # SIGALRM
    assert time.monotonic() - started < 30


def test_a_screened_candidate_near_the_best_is_timed_interleaved():
    """With reused reference times, `confirm_above` decides: a screened geomean at least that high is timed
    interleaved with the reference (and refreshes the reused times); one below stays screened. Reference times
    are the evaluation slot's: a check in another slot reuses nothing."""
    from evokernel.harness import Slot

    slot = Slot()
    try:
        options = CheckOptions(scenario_set="quick", rounds=5, reference_reuse_s=600)
        assert not check_kernel(TASK.original, TASK, options, slot).reference_reused
        confirmed = check_kernel(TASK.original, TASK, dataclasses.replace(options, confirm_above=0.01), slot)
        assert confirmed.correct and not confirmed.reference_reused, confirmed.failure
        screened = check_kernel(TASK.original, TASK, dataclasses.replace(options, confirm_above=100.0), slot)
        assert screened.correct and screened.reference_reused, screened.failure
        other_slot = check_kernel(TASK.original, TASK, dataclasses.replace(options, confirm_above=100.0))
        assert other_slot.correct and not other_slot.reference_reused
        stale = check_kernel(TASK.original, TASK, dataclasses.replace(options, reference_reuse_s=0.0), slot)
        assert stale.correct and not stale.reference_reused  # too old: interleaved again
    finally:
        slot.close()


def test_a_screened_check_never_runs_the_original(tmp_path):
    """A screened child's limits come from the reused reference times, and comparing its outputs with the
    original's could reject nothing: the original is neither loaded nor run. Shown with a task whose original
    crashes once the reference times are taken: the screened check passes, an interleaved one does not."""
    from evokernel.harness import Slot

    task_dir = tmp_path / "rmsnorm_crashing_original"
    shutil.copytree("examples/tasks/rmsnorm_cpu", task_dir)
    kernel = (task_dir / "original.c").read_text()
    task, slot = get_task(str(task_dir)), Slot()
    try:
        options = CheckOptions(scenario_set="quick", rounds=5, reference_reuse_s=600, confirm_above=100.0)
        assert check_source(kernel, task, options, slot=slot).correct
        (task_dir / "original.c").write_text(kernel.replace("  const int rows = p->rows",
                                                            "  *(volatile int*)0 = 1;\n  const int rows = p->rows"))
        screened = check_source(kernel, task, options, slot=slot)
        assert screened.correct and screened.reference_reused, screened.failure
        interleaved = check_source(kernel, task, dataclasses.replace(options, reference_reuse_s=None), slot=slot)
        assert not interleaved.correct and "crashed" in interleaved.failure, interleaved.failure
    finally:
        slot.close()


def test_a_librarys_slow_first_call_on_a_shape_is_not_taken_for_a_hang(tmp_path, monkeypatch):
    """A library baseline builds plans or compiles (torch.compile: seconds) at its first call on a shape: that
    warm-up has time of its own, beyond the step limit that catches a hanging kernel."""
    from evokernel.harness import profiles

    task_dir = tmp_path / "rmsnorm_slow_library"
    shutil.copytree("examples/tasks/rmsnorm_cpu", task_dir)
    source = (task_dir / "task.py").read_text().replace(
        "from evokernel.harness.task import Scalar, Task, Tensor",
        "import time\n\nfrom evokernel.harness.task import Baseline, Scalar, Task, Tensor")
    source += '''

COMPILED = set()


def _compile_then_run(arrays, s):
    if s not in COMPILED:  # the first call on a shape compiles; later ones find it compiled
        time.sleep(5.0)
        COMPILED.add(s)
    return arrays


RMSNormCpu.baselines = lambda self: {"slow": Baseline(lambda prepared, s: prepared, prepare=_compile_then_run)}
'''
    (task_dir / "task.py").write_text(source)
    # steps limited to 2 s, the first call on a shape takes 5 s (a limit of 1 s failed ordinary steps on a busy
    # 2-core machine)
    monkeypatch.setitem(profiles.PROFILES, "cpu", dataclasses.replace(profiles.PROFILES["cpu"], min_step_limit_s=2.0))
    report = check_kernel(task_dir / "original.c", str(task_dir),
                          CheckOptions(scenario_set="quick", rounds=5, speed_reference="slow"))
    assert report.correct, report.failure
    assert all(s.original_time_ms is not None for s in report.scenarios)


def test_the_cuda_toolkit_is_found_behind_an_nvcc_wrapper_script(tmp_path, monkeypatch):
    """An `nvcc` on PATH that is a script outside the toolkit (a site wrapper): the toolkit is the folder nvcc
    reports in a dry run, not the wrapper's parent; CUDA_HOME, where set, comes first."""
    from evokernel.harness import languages

    toolkit = tmp_path / "cuda-x"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.write_text(f"#!/bin/sh\necho '#$ _HERE_={toolkit}/bin' >&2\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert languages.cuda_root() == toolkit
    assert languages.cuda_library_dirs()[0] == str(toolkit / "lib64")
    other = tmp_path / "cuda-home"
    (other / "include").mkdir(parents=True)
    (other / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(other))
    assert languages.cuda_root() == other
