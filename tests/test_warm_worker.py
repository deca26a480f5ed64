"""A worker started ahead of time (searches keep one per evaluation slot) serves exactly one candidate:
nothing one candidate leaves behind (files in /tmp or its working directory, globals) reaches the next;
and what the sandbox shows of the installation."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from evokernel.harness import (CheckOptions, Slot, check, check_source, get_task, jit_cache, profile_of, sandbox,
                               supervisor)
from planted import CPU, CPU_OUTPUT_SIZE, CUDA, CUDA_OUTPUT_BYTES, SYSCALLS, chain

TASK = get_task("attention-fwd-cpu")
ORIGINAL = TASK.original.read_text()

# At its first call the kernel looks for what an earlier candidate would have left (a file in /tmp, one in
# its working directory, a global), leaves the same for the next, and answers wrongly if it found any.
LEAVES_STATE = chain(lambda source: source + SYSCALLS, CPU.wrap(f"""
static int evaluations_seen;
static int evk_left_before(void) {{
  static const char* places[] = {{"/tmp/evk-leftover", "evk-leftover"}};
  int found = evaluations_seen++ > 0;
  for (int i = 0; i < 2; ++i) {{
    const long fd = evk_sys3(EVK_NR_OPEN, (long)places[i], 0, 0);
    if (!EVK_FAILED(fd)) {{ found = 1; evk_sys3(EVK_NR_CLOSE, fd, 0, 0); }}
    const long made = evk_sys3(EVK_NR_OPEN, (long)places[i], EVK_O_WRONLY | EVK_O_CREAT, 0644);
    if (!EVK_FAILED(made)) evk_sys3(EVK_NR_CLOSE, made, 0, 0);
  }}
  return found;
}}
int evk_attention_fwd(const evk_attention_params* p) {{
  static int checked, found;
  if (!checked) {{ checked = 1; found = evk_left_before(); }}
  if (found && p && p->o) {{ for (long i = 0; i < {CPU_OUTPUT_SIZE}; ++i) p->o[i] = 0.f; return 0; }}
  return honest_fwd(p);
}}
"""))
OPTIONS = CheckOptions(scenario_set="quick", rounds=3, warm_worker=True)


@pytest.fixture
def slot():
    """An evaluation slot for the test's checks; closed after it (no worker left waiting)."""
    made = Slot()
    yield made
    made.close()


def test_each_candidate_starts_clean_in_a_warm_worker(slot):
    source = LEAVES_STATE(ORIGINAL)
    for evaluation in range(3):
        report = check_source(source, TASK, OPTIONS, slot=slot)
        assert report.correct, f"evaluation {evaluation + 1} saw state left by an earlier one: {report.failure}"
        waiting = slot.warm[("cpu", False, TASK.directory)]
        assert waiting.proc.poll() is None  # the next evaluation's worker is started and waiting


def test_a_cold_worker_makes_its_device_context_on_request_and_a_warm_one_before(slot):
    """A worker started for the check makes its device context after the request (a phase of the check);
    the worker kept warm for the next check is told to make it once the previous check's worker ended."""
    cold = check_source(ORIGINAL, TASK, CheckOptions(scenario_set="quick", rounds=3), slot=slot)
    assert cold.correct and "device start" in cold.phase_seconds, cold.phase_seconds
    check_source(ORIGINAL, TASK, OPTIONS, slot=slot)  # leaves a warm worker in the slot, prepared
    warm = check_source(ORIGINAL, TASK, OPTIONS, slot=slot)
    assert warm.correct and "device start" not in warm.phase_seconds, warm.phase_seconds


def test_without_bubblewrap_the_runner_still_leaves_no_file(monkeypatch, slot):
    """Where nothing isolates (/tmp shared) the first evaluation's kernel still cannot create its file: once
    a kernel is loaded, its runner's seccomp filter refuses opening files. (The CUDA form below, whose
    kernels still run in the worker, shows what the probe finds without isolation.)"""
    monkeypatch.setenv("EVOKERNEL_ISOLATION", "none")
    sandbox.isolation.cache_clear()
    leftover = "/tmp/evk-leftover"
    try:
        first = check_source(LEAVES_STATE(ORIGINAL), TASK, OPTIONS, slot=slot)
        created = os.path.exists(leftover)
        second = check_source(LEAVES_STATE(ORIGINAL), TASK, OPTIONS, slot=slot)
    finally:
        if os.path.exists(leftover):
            os.unlink(leftover)
        slot.close()
        sandbox.isolation.cache_clear()
    assert first.correct and second.correct, (first.failure, second.failure)
    assert not created


# The CUDA form: at its first call the kernel looks for device state an earlier candidate left (most of the
# device's memory taken, a file in /tmp), then leaves the same itself: it allocates all but 2 GiB of the free
# device memory and never frees it. It answers wrongly if it found any.
CUDA_LEAVES_STATE = chain(lambda source: source + SYSCALLS, CUDA.wrap(f"""
static int evk_left_before(void) {{
  size_t free_bytes = 0, total_bytes = 0;
  int found = cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess || free_bytes < total_bytes / 2;
  const long fd = evk_sys3(EVK_NR_OPEN, (long)"/tmp/evk-leftover", 0, 0);
  if (!EVK_FAILED(fd)) {{ found = 1; evk_sys3(EVK_NR_CLOSE, fd, 0, 0); }}
  const long made = evk_sys3(EVK_NR_OPEN, (long)"/tmp/evk-leftover", EVK_O_WRONLY | EVK_O_CREAT, 0644);
  if (!EVK_FAILED(made)) evk_sys3(EVK_NR_CLOSE, made, 0, 0);
  void* hog = 0;
  if (!found && free_bytes > (3ull << 30)) cudaMalloc(&hog, free_bytes - (2ull << 30));
  return found;
}}
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {{
  static int checked, found;
  if (!checked) {{ checked = 1; found = evk_left_before(); }}
  if (found && p && p->o) return cudaMemsetAsync(p->o, 0, {CUDA_OUTPUT_BYTES}, stream) == cudaSuccess ? 0 : 5;
  return honest_fwd(p, stream);
}}
"""))


@pytest.mark.gpu
def test_device_state_of_one_candidate_never_reaches_the_next(slot):
    """Device memory held and files left by one candidate are gone when the next one runs (its worker was
    started during the earlier check: its device context is made only after that check's worker ended)."""
    task = get_task("attention-fwd")
    source = CUDA_LEAVES_STATE(task.original.read_text())
    options = CheckOptions(scenario_set="quick", rounds=3, warm_worker=True)
    for evaluation in range(3):
        report = check_source(source, task, options, slot=slot)
        assert report.correct, f"evaluation {evaluation + 1} saw state left by an earlier one: {report.failure}"
        assert slot.warm[("cuda", True, task.directory)].proc.poll() is None


def test_the_sandbox_shows_the_package_but_not_the_checkout_around_it(tmp_path, monkeypatch):
    """A checkout on the import path (PYTHONPATH=., a .pth file) must not let a kernel read what lies beside
    the package there (a .env file, say), nor the harness's current directory."""
    if not sandbox.isolation().enforced:
        pytest.skip(sandbox.isolation().describe())
    import evokernel

    package = Path(evokernel.__file__).resolve().parent
    beside = package.parent / "pyproject.toml"
    assert beside.exists()
    monkeypatch.syspath_prepend(str(package.parent))
    harness_cwd = tmp_path / "cwd"
    harness_cwd.mkdir()
    (harness_cwd / "README.md").write_text("the harness's current directory")
    monkeypatch.chdir(harness_cwd)
    probe = ("import os, sys; print(os.path.exists(sys.argv[1]), os.path.exists(sys.argv[2]), "
             "os.path.exists(sys.argv[3]))")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = sandbox.run_isolated([sys.executable, "-c", probe, str(package / "__init__.py"), str(beside),
                                 str(harness_cwd / "README.md")], scratch, [], timeout_s=60)
    assert proc.stdout.split() == ["True", "False", "False"], proc.stdout + proc.stderr


def test_a_script_run_from_tmp_leaves_the_sandbox_its_own_tmp(tmp_path, monkeypatch):
    """`python /tmp/x.py` puts /tmp on sys.path; bound over the sandbox's /tmp it showed the host's temporary
    files and made /tmp read-only, where compilers write theirs ("nvcc fatal: Could not open output file")."""
    if not sandbox.isolation().enforced:
        pytest.skip(sandbox.isolation().describe())
    monkeypatch.syspath_prepend("/tmp")
    host_file = Path("/tmp") / f"evk-host-{os.getpid()}"
    host_file.write_text("a host temporary file")
    try:
        probe = ("import os, sys, tempfile; print(os.path.exists(sys.argv[1]));"
                 "tempfile.NamedTemporaryFile(dir='/tmp').close(); print('writable')")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        proc = sandbox.run_isolated([sys.executable, "-c", probe, str(host_file)], scratch, [], timeout_s=60)
        assert proc.stdout.split() == ["False", "writable"], proc.stdout + proc.stderr
    finally:
        host_file.unlink()


def test_an_installed_package_keeps_its_site_packages_visible(monkeypatch):
    """Installed (not a checkout), the package's parent is site-packages: numpy and torch live there."""
    import evokernel

    site = Path(sys.prefix) / "lib" / "python3" / "site-packages"
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    monkeypatch.setattr(evokernel, "__file__", str(site / "evokernel" / "__init__.py"))
    monkeypatch.setattr(os.path, "exists", lambda path: True)
    assert site in sandbox.python_paths()


class _Recorded:
    """A stand-in task and backend for the speed reference's warm-up: records which shapes were called."""

    def __init__(self, supported=lambda scenario: True):
        from evokernel.harness.task import Baseline

        self.called: list[int] = []
        self.released = 0
        self.library = Baseline(run=lambda arrays, scenario: self.called.append(scenario), supports=supported)
        self.dtype = "float32"

    # task
    def baselines(self):
        return {"library": self.library}

    def scenario_from(self, fields):
        return fields["n"]

    def arguments(self, scenario):
        return []

    # backend
    def make_inputs(self, arguments, scenario, seed, distribution, dtype):
        return type("Inputs", (), {"prepared": {}, "scenario": scenario, "inputs": lambda self: {}})()

    def release(self, inputs):
        self.released += 1


def test_the_speed_reference_is_called_on_each_shape_before_the_request_until_it_arrives():
    from evokernel.harness.worker_start import warm_speed_reference

    scenarios = [{"n": n} for n in range(5)]
    every = _Recorded()
    warm_speed_reference(every, every, {"speed_reference": "library", "scenarios": scenarios}, lambda: False)
    assert every.called == [0, 1, 2, 3, 4] and every.released == 5
    # the request arrives after two shapes: the warm-up stops there
    stopped = _Recorded()
    polls = iter([False, False, True])
    warm_speed_reference(stopped, stopped, {"speed_reference": "library", "scenarios": scenarios}, lambda: next(polls))
    assert stopped.called == [0, 1]
    # shapes the library does not support are skipped; a kernel file or the original is never warmed up
    odd = _Recorded(supported=lambda n: n % 2 == 1)
    warm_speed_reference(odd, odd, {"speed_reference": "library", "scenarios": scenarios}, lambda: False)
    assert odd.called == [1, 3]
    for reference in ("original", "file"):
        none = _Recorded()
        warm_speed_reference(none, none, {"speed_reference": reference, "scenarios": scenarios}, lambda: False)
        assert none.called == []


def test_the_next_worker_is_told_the_last_checks_speed_reference_and_scenarios(monkeypatch):
    told, runners = [], []
    real_prepare = supervisor._Started.prepare

    def prepare(self, warm=None, runner=None):
        told.append(warm)
        real_prepare(self, warm, runner=runner)
        runners.append(runner and (runner.read_bytes(), (self.library / supervisor.RUNNER_NAME).read_bytes()))

    monkeypatch.setattr(supervisor._Started, "prepare", prepare)
    report = check_source(ORIGINAL, TASK, OPTIONS)
    assert report.correct, report.failure
    assert told and told[-1]["speed_reference"] == "original"
    given, placed = runners[-1]  # and given the kernel runner, to start its runners before its request comes
    assert given == placed
    assert [TASK.scenario_from(fields) for fields in told[-1]["scenarios"]] == TASK.scenarios("quick")
    check_source(ORIGINAL, TASK, CheckOptions(scenario_set="quick", rounds=3, warm_worker=True, time_kernels=False))
    assert told[-1] is None  # a check that times nothing gives nothing to warm up


def test_stdin_lines_tell_whether_the_request_has_arrived():
    from evokernel.harness.worker_start import StdinLines

    read_end, write_end = os.pipe()
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        lines = StdinLines()
        assert not lines.waiting()
        os.write(write_end, b'{"type": "prepare"}\n{"seed": 1}\n')  # both in one write: one read takes both
        assert lines.readline() == '{"type": "prepare"}'
        assert lines.waiting()  # the second line is already read from the pipe, and still counts
        assert lines.readline() == '{"seed": 1}'
        assert not lines.waiting()
        os.write(write_end, b'{"seed": 2}\n')
        assert lines.waiting() and lines.readline() == '{"seed": 2}'
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read_end)
        os.close(write_end)


# The kernel tries to rewrite its private copy of the JIT cache: the entry a library compiled there (to plant
# code the speed reference would run in later checks) and a file of its own. A kernel in a CPU task's runner
# cannot open files at all (seccomp); one loaded by a GPU task's worker writes its private copy.
def _rewrites_jit_copy(entry: str) -> Callable[[str], str]:
    return chain(lambda source: source + SYSCALLS, CPU.wrap(f"""
static int evk_rewrite_jit_copy(void) {{
  static const char planted[] = "planted code";
  static const char* const paths[] = {{"{jit_cache.DIRECTORY}/{entry}", "{jit_cache.DIRECTORY}/planted"}};
  int written = 0;
  for (int i = 0; i < 2; ++i) {{
    const long fd = evk_sys3(EVK_NR_OPEN, (long)paths[i], EVK_O_WRONLY | EVK_O_CREAT | EVK_O_TRUNC, 0644);
    if (EVK_FAILED(fd)) continue;
    written += evk_sys3(EVK_NR_WRITE, fd, (long)planted, sizeof planted - 1) == (long)sizeof planted - 1;
    evk_sys3(EVK_NR_CLOSE, fd, 0, 0);
  }}
  return written == 2;
}}
int evk_attention_fwd(const evk_attention_params* p) {{
  static int tried;
  if (!tried) {{ tried = 1; evk_rewrite_jit_copy(); }}
  return honest_fwd(p);
}}
"""))


# A library speed reference that leaves what it "compiled" where the driver keeps its JIT cache.
LIBRARY_THAT_COMPILES = '''

def _compiles_into_the_jit_cache(arrays, scenario):
    import os
    from pathlib import Path

    (Path(os.environ["CUDA_CACHE_PATH"]) / f"compiled-{scenario.name}").write_text("code the library compiled")


AttentionFwdCpu.baselines = lambda self: {"library": Baseline(_compiles_into_the_jit_cache)}
'''


@pytest.fixture
def compiling_library(tmp_path, monkeypatch):
    """The CPU task with a library speed reference that "compiles" into the JIT cache, its checks run with
    devices on (standing in for a GPU task: no GPU here), an empty harness cache and no warmer run yet."""
    task_dir = tmp_path / "attention_fwd_cpu"
    shutil.copytree(TASK.directory, task_dir, ignore=shutil.ignore_patterns("__pycache__"))
    task_py = task_dir / "task.py"
    task_py.write_text(task_py.read_text().replace(
        "import numpy as np\n", "import numpy as np\n\nfrom evokernel.harness.task import Baseline\n", 1)
        + LIBRARY_THAT_COMPILES)
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(check, "run_worker", lambda *args, **kwargs: supervisor.run_worker(*args, **{**kwargs, "devices": True}))
    return get_task(str(task_dir))


def _contents(directory: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in directory.iterdir()}


def test_only_the_warmer_writes_the_jit_cache_that_workers_copy(compiling_library, slot):
    """cuDNN compiles its kernels from PTX at a shape's first call in each process; the driver keeps the result
    only in a cache it can write. Every worker of a GPU task gets a private copy of a master cache; the master
    is written only by a warmer, which runs the task's library code once per slot and never a candidate. A
    candidate that rewrites its copy changes nothing the next worker or later checks see. (The CPU task with
    devices on stands in for a GPU task: no GPU here.)"""
    task = compiling_library
    scenarios = task.scenarios("quick")
    warm = {"speed_reference": "library", "scenarios": [asdict(s) for s in scenarios]}
    key = ("cpu", True, task.directory)

    supervisor.warm_jit_cache(key, warm, limit_s=60, slot=slot)
    compiled = {f"compiled-{s.name}": "code the library compiled" for s in scenarios}
    assert _contents(jit_cache.master()) == compiled

    options = CheckOptions(scenario_set="quick", rounds=3, warm_worker=True, speed_reference="library")
    report = check_source(_rewrites_jit_copy(f"compiled-{scenarios[0].name}")(ORIGINAL), task, options, slot=slot)
    assert report.correct, report.failure
    assert _contents(jit_cache.master()) == compiled  # the warmer ran once per slot: not again for the check
    waiting = slot.warm[key]
    assert _contents(Path(waiting.holder.name) / "scratch" / jit_cache.DIRECTORY) == compiled

    # once per slot: a warm-up asked for again does not run again
    shutil.rmtree(jit_cache.master())
    supervisor.warm_jit_cache(key, warm, limit_s=60, slot=slot)
    assert not jit_cache.master().exists()


def test_a_check_against_a_library_warms_the_jit_cache_first_and_one_against_a_built_kernel_does_not(
        compiling_library, slot):
    """The warmer is started by the checks themselves (a search calls nothing else): the first check in this
    process against a library speed reference fills the master before its own worker starts. A built kernel
    as the speed reference compiles nothing in a library, so no warmer runs for it."""
    task = compiling_library
    options = CheckOptions(scenario_set="quick", rounds=3, warm_worker=True, speed_reference="original")
    assert check_source(ORIGINAL, task, options, slot=slot).correct
    assert not jit_cache.master().exists()

    options = CheckOptions(scenario_set="quick", rounds=3, warm_worker=True, speed_reference="library")
    assert check_source(ORIGINAL, task, options, slot=slot).correct
    assert _contents(jit_cache.master()) == {f"compiled-{s.name}": "code the library compiled"
                                             for s in task.scenarios("quick")}


def _workers_of_this_process() -> list[int]:
    """Worker processes started by this process (bubblewrap or the interpreter running the worker module)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me and "evokernel.harness.worker" in command:
            found.append(int(entry.name))
    return found


def test_two_slots_checking_at_once_leave_no_worker_behind():
    """Two evaluation slots run checks with warm workers at the same time (as the local evaluator's threads
    do): each keeps its own next worker, so none is overwritten and left unreaped; closing the slots leaves no
    worker process."""
    from concurrent.futures import ThreadPoolExecutor

    slots = [Slot(), Slot()]

    def checks(slot: Slot) -> list[bool]:
        return [check_source(ORIGINAL, TASK, OPTIONS, slot=slot).correct for _ in range(2)]

    try:
        with ThreadPoolExecutor(2) as pool:  # (a worker dies with the thread that started it: check in here)
            results = list(pool.map(checks, slots))
            assert results == [[True, True], [True, True]]
            waiting = [slot.warm[("cpu", False, TASK.directory)] for slot in slots]
            assert waiting[0] is not waiting[1] and all(w.proc.poll() is None for w in waiting)
            assert sorted(_workers_of_this_process()) == sorted(w.proc.pid for w in waiting)  # none overwritten
            for slot in slots:
                slot.close()
            assert _workers_of_this_process() == []
    finally:
        for slot in slots:
            slot.close()


def test_a_slot_prepared_before_its_first_check_hands_that_check_a_warmed_worker(compiling_library, slot,
                                                                                 monkeypatch):
    """A search prepares each GPU slot while the first kernels compile elsewhere: the library's JIT cache is
    warmed and the first check's worker started then, so the first check starts no worker of its own."""
    task = compiling_library
    monkeypatch.setattr(check, "profile_of", lambda backend: dataclasses.replace(profile_of(backend), devices=True))
    options = CheckOptions(scenario_set="quick", rounds=3, warm_worker=True, speed_reference="library")
    key = ("cpu", True, task.directory)

    check.prepare_slot(task, options, slot)
    assert _contents(jit_cache.master()) == {f"compiled-{s.name}": "code the library compiled"
                                             for s in task.scenarios("quick")}
    prepared = slot.warm[key]
    assert prepared.proc.poll() is None
    check.prepare_slot(task, options, slot)  # a slot with a waiting worker is left as it is
    assert slot.warm[key] is prepared

    assert check_source(ORIGINAL, task, options, slot=slot).correct
    assert prepared.proc.poll() is not None  # it served the check (and was taken down after it)
    assert slot.warm[key] is not prepared and slot.warm[key].proc.poll() is None


def test_preparing_a_slot_is_nothing_without_a_device_or_a_search():
    slot = Slot()
    try:
        check.prepare_slot(TASK, OPTIONS, slot)  # a CPU task: its workers start after the timed check
        check.prepare_slot(get_task("attention-fwd"), CheckOptions(warm_worker=False), slot)
        assert slot.warm == {}
    finally:
        slot.close()
