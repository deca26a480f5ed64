"""The search on the CPU task, on a local Ray instance: the default run, bad candidates, duplicate
skipping and resume after `kill -9` of the driver. Budgets are tiny so the file runs in about a minute."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
import yaml
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.config import load_config
from evokernel.errors import BadInput
from evokernel.harness import get_task
from evokernel.mutations import Proposal
from evokernel.mutations.operators.knobs import KnobCrossover, KnobMutation
from evokernel.harness import rejection_kind
from evokernel.search import Search
from evokernel.search.proposing import UNPRODUCTIVE_LIMIT
from evokernel.store import Store

ORIGINAL = get_task("attention-fwd-cpu").original.read_text()
ENTRY = "int evk_attention_fwd(const evk_attention_params* p) {\n"


pytestmark = pytest.mark.usefixtures("local_ray")


def make_config(tmp_path: Path, **settings) -> Path:
    data = {"task": "attention-fwd-cpu", "scenarios": "quick", "trials": 1, "population_size": 4,
            "resources": {"max_parallel": 1, "evaluation_timeout_s": 30}, "random_seed": 7, **settings}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def finished_rows(run_dir: Path) -> list:
    with Store(run_dir, readonly=True) as store:
        return [row for row in store.individuals() if row.status in ("correct", "rejected")]


def finished_count(run_dir: Path) -> int:
    """Finished evaluations of a live run (0 while the driver is still creating its store)."""
    try:
        return len(finished_rows(run_dir))
    except (sqlite3.OperationalError, BadInput):
        return 0


def test_default_run_ends_with_a_best_kernel_at_least_as_fast_as_the_seed(tmp_path):
    result = CliRunner().invoke(main, ["run", "--budget", "5", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "no LLM model is configured" in result.output
    for command in ("evokernel lineage", "--best", "evokernel show", "evokernel report"):
        assert command in result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    with Store(run_dir, readonly=True) as store:
        rows = store.individuals()
        seed = next(row for row in rows if row.operator == "seed")
        best = store.best(1)[0]
        meta = store.meta()
    assert len(rows) == 5 and all(row.status == "correct" for row in rows)
    assert best.fitness == max(row.fitness for row in rows) and seed.parent_ids == []
    assert f"individual {best.id}" in result.output
    assert meta["status"] == "finished" and meta["config"]["task"] == "attention-fwd-cpu"
    assert {"python", "evokernel", "ray", "deap"} <= set(meta["versions"])
    assert meta["random_seed"] == 0 and len(meta["logbook"]) == 5
    assert load_config(run_dir / "config.yaml").budget.evaluations == 5
    assert all(set(row.knobs) == {"BLOCK_Q", "BLOCK_K", "KEY_OUTER", "THREADS"} for row in rows)
    assert all(row.parent_ids for row in rows if row.operator != "seed")


def test_crashing_and_hanging_candidates_are_recorded_and_the_run_goes_on(tmp_path):
    crash = tmp_path / "crash.c"
    crash.write_text(ORIGINAL.replace(ENTRY, ENTRY + "  *(volatile int*)0 = 1;\n"))
    hang = tmp_path / "hang.c"
    hang.write_text(ORIGINAL.replace(ENTRY, ENTRY + "  volatile int spin = 1;\n  while (spin) {}\n"))
    original = tmp_path / "original.c"
    original.write_text(ORIGINAL)
    path = make_config(tmp_path, seeds=[str(crash), str(hang), str(original)], budget={"evaluations": 5},
                       resources={"max_parallel": 1, "evaluation_timeout_s": 4})
    result = Search(load_config(path), tmp_path / "run").run()
    assert result.status == "finished" and result.stats.evaluations == 5
    rows = {row.id: row for row in finished_rows(tmp_path / "run")}
    assert rows[1].status == "rejected" and "crashed (SIGSEGV)" in rows[1].failure
    assert rows[2].status == "rejected" and "timed out after 4 s" in rows[2].failure
    assert rows[2].eval_seconds < 30
    assert [rows[i].status for i in (3, 4, 5)] == ["correct"] * 3, [rows[i].failure for i in (3, 4, 5)]  # the search went on
    assert result.stats.failures == {"crashed (SIGSEGV)": 1, "timed out": 1}
    assert result.best.id in (3, 4, 5)


class Echo:
    """An operator whose child is its parent with a new comment: a duplicate after normalisation."""

    name, arity, uses_llm = "echo", 1, False

    def __call__(self, parents, context):
        return Proposal(source=f"// rewritten {context.rng.random()}\n" + parents[0].source, operator=self.name,
                        parent_ids=[parents[0].id])


def test_duplicates_are_skipped_without_spending_the_budget(tmp_path):
    config = load_config(make_config(tmp_path, budget={"evaluations": 4}))
    result = Search(config, tmp_path / "mixed", operator_set={"echo": (Echo(), 3.0),
                                                              "knob-mutation": (KnobMutation(), 1.0)}).run()
    rows = finished_rows(tmp_path / "mixed")
    assert len(rows) == 4 and result.stats.evaluations == 4
    assert len({row.normalized_hash for row in rows}) == 4  # nothing evaluated twice
    assert result.stats.duplicates > 0 and not any(row.operator == "echo" for row in rows)
    with Store(tmp_path / "mixed", readonly=True) as store:
        assert store.meta()["counters"]["duplicates"] == result.stats.duplicates

    only_echo = Search(config, tmp_path / "echo", operator_set={"echo": (Echo(), 1.0)}).run()
    assert only_echo.stats.evaluations == 1  # the seed; then every proposal was a duplicate
    assert only_echo.stats.duplicates == UNPRODUCTIVE_LIMIT
    assert "no new kernels" in only_echo.reason


def test_failure_kinds_drop_details():
    assert rejection_kind("crashed (SIGSEGV) during verify d32-b1-h2-s48") == "crashed (SIGSEGV)"
    assert rejection_kind("timed out after 4 s (killed)") == "timed out"
    assert rejection_kind("d16-b1-h4kv2-q33k57-causal-scale0.5: max error 3.1 > tolerance 0.02") == \
        rejection_kind("d64-b1-h2-s33: max error 1e-1 > tolerance 2") == "max error N > tolerance N"
    assert rejection_kind("candidate does not compile: x.c:3: error") == "candidate does not compile"


def test_resume_after_kill_9_loses_and_repeats_no_evaluation(tmp_path):
    budget = 10
    path = make_config(tmp_path, budget={"evaluations": budget})
    runs = tmp_path / "runs"
    driver = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", str(path), "--runs-dir", str(runs)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            dirs = list(runs.glob("*/lineage.db")) if runs.exists() else []
            if dirs and finished_count(dirs[0].parent) >= 3:
                with Store(dirs[0].parent, readonly=True) as store:
                    if store.count("running"):
                        break
            time.sleep(0.05)
        else:
            pytest.fail("the driver did not get going")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        try:  # the driver's local Ray processes, which the killed driver can no longer stop
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run_dir = dirs[0].parent
    before = {row.id: row.finished_at for row in finished_rows(run_dir)}
    with Store(run_dir, readonly=True) as store:
        left = [row.id for row in store.individuals() if row.status in ("pending", "running")]
        assert store.meta()["status"] == "running"  # killed, never closed
    assert left and len(before) < budget

    result = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "resuming" in result.output
    with Store(run_dir, readonly=True) as store:
        rows = store.individuals()
        meta = store.meta()
    assert len(rows) == budget and all(row.status in ("correct", "rejected") for row in rows)
    assert sum(row.operator == "seed" for row in rows) == 1  # the seed was not added again
    assert len({row.normalized_hash for row in rows}) == budget  # no kernel evaluated twice
    assert [row.id for row in rows] == list(range(1, budget + 1))  # ids stay unique and dense
    assert all(row.finished_at == before[row.id] for row in rows if row.id in before)  # nothing re-run
    assert all(row.id in {r.id for r in rows} for row in rows if row.id in left)  # left ones finished
    assert meta["status"] == "finished" and len(meta["sessions"]) == 2 and meta["sessions"][1]["resumed"]


def test_a_dead_evaluation_worker_costs_one_evaluation(tmp_path):
    from evokernel.evaluation.ray_pool import RayPool
    from evokernel.harness import CheckOptions

    pool = RayPool("attention-fwd-cpu", CheckOptions(scenario_set="grid", rounds=30), 1, 1, 0)
    try:
        def finish() -> list:
            finished = []
            while not finished:
                finished = pool.wait(30)
            return finished

        pool.submit(1, ORIGINAL, "warm-up", CheckOptions(time_kernels=False))
        assert finish()[0].report["correct"]
        pool.submit(2, ORIGINAL, "long")
        time.sleep(1.0)  # the actor is inside the check (its sandboxed child finishes on its own)
        ray.kill(pool.actors[0], no_restart=False)
        (dead,) = finish()
        # Ray reports the killed call as died (one rejection, sometimes seen as its sandboxed child's
        # SIGKILL), or as unavailable while the actor restarts, and then the pool sends it again.
        assert dead.key == 2
        assert dead.report["correct"] or any(reason in dead.report["failure"]
                                             for reason in ("evaluation worker died", "crashed (SIGKILL)"))
        pool.submit(3, ORIGINAL, "after", CheckOptions(time_kernels=False))  # the actor was restarted
        (after,) = finish()
        assert after.key == 3 and after.report["correct"], after.report["failure"]
        assert 0 < pool.busy_fraction() <= 1
    finally:
        pool.shutdown()


def test_a_worker_past_its_deadline_is_killed_and_charged_once():
    from evokernel.evaluation.ray_pool import RayPool
    from evokernel.harness import CheckOptions

    # The kernel hangs as it is loaded (a constructor): there the harness gives a worker 60 s to start, and the
    # check 600 s in all, so the driver's deadline of 3 s is certainly first, also on a busy machine.
    hang = ORIGINAL + ("\n__attribute__((constructor)) static void evk_hang(void) "
                       "{ for (volatile int spin = 1; spin;) {} }\n")
    pool = RayPool("attention-fwd-cpu", CheckOptions(timeout_s=600), 1, 1, 0)
    try:
        pool.submit(0, ORIGINAL, "warm-up", CheckOptions(time_kernels=False))  # the actor is up before the clock runs
        finished = []
        while not finished:
            finished = pool.wait(30)
        assert finished[0].report["correct"], finished[0].report["failure"]
        pool.deadline_s = 3.0  # the driver's limit, far below the harness's own
        pool.submit(1, hang, "hangs")
        finished = []
        while not finished:
            finished = pool.wait(1)
        (killed,) = finished
        assert killed.key == 1 and not killed.report["correct"]
        assert "killed after exceeding its deadline" in killed.report["failure"]
        pool.deadline_s = 120.0
        pool.submit(2, ORIGINAL, "after", CheckOptions(time_kernels=False))
        finished = []
        while not finished:
            finished = pool.wait(30)
        assert finished[0].key == 2 and finished[0].report["correct"], finished[0].report["failure"]
    finally:
        pool.shutdown()


def test_prebuild_fills_the_build_cache(tmp_path, monkeypatch):
    from evokernel.evaluation.ray_pool import _prebuild
    from evokernel.harness.build import build

    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    task = get_task("attention-fwd-cpu")
    source = ORIGINAL.replace("#define BLOCK_K 8 ", "#define BLOCK_K 16 ")
    _prebuild(source, task.name)
    assert build(source, task.language, task.header).cached


def test_a_build_under_way_is_waited_for_not_repeated(tmp_path, monkeypatch):
    """A check that finds its candidate being prebuilt waits for that build (one compile, not two)."""
    from concurrent.futures import ThreadPoolExecutor

    from evokernel.harness import build as build_module

    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    compiles = []
    compile_for_real = build_module.run_isolated

    def slow_compile(*args, **kwargs):
        compiles.append(time.time())
        time.sleep(1.0)
        return compile_for_real(*args, **kwargs)

    monkeypatch.setattr(build_module, "run_isolated", slow_compile)
    task = get_task("attention-fwd-cpu")
    with ThreadPoolExecutor(2) as threads:
        results = list(threads.map(lambda _: build_module.build(ORIGINAL, task.language, task.header), range(2)))
    assert len(compiles) == 1 and all(r.ok for r in results)
    waited = next(r for r in results if r.cached)
    assert waited.seconds >= 0.9 and waited.library == next(r for r in results if not r.cached).library


def test_gpu_candidates_are_proposed_far_enough_ahead_to_be_built_before_their_slot_is_free(tmp_path, monkeypatch):
    """An evaluator that compiles ahead gets `builds_ahead` more queued candidates per slot to compile."""
    from evokernel.evaluation.local import LocalEvaluator

    queued_at_prebuild: list[int] = []
    monkeypatch.setattr(LocalEvaluator, "builds_ahead", 2)
    monkeypatch.setattr(LocalEvaluator, "prebuild", lambda self, source: queued_at_prebuild.append(len(search.queue)))
    config = load_config(make_config(tmp_path, budget={"evaluations": 6},
                                     resources={"evaluator": "local", "max_parallel": 1}))
    search = Search(config, tmp_path / "run", operator_set={"knob-mutation": (KnobMutation(), 1.0)})
    assert search.run().stats.evaluations == 6
    assert max(queued_at_prebuild) == 3  # one per slot, and two more to build ahead


def test_the_seeds_compile_while_the_slots_start(tmp_path, monkeypatch):
    """Every seed is handed to `prebuild` at the run's start, before any is submitted: the first seed's build
    overlaps its slot's start-up and the others' builds overlap the first checks."""
    from evokernel.evaluation.local import LocalEvaluator

    prebuilt: list[str] = []
    submitted_first: list[int] = []
    monkeypatch.setattr(LocalEvaluator, "prebuild", lambda self, source: prebuilt.append(source))
    submit = LocalEvaluator.submit
    monkeypatch.setattr(LocalEvaluator, "submit", lambda self, *args, **kwargs: (
        submitted_first.append(len(prebuilt)) if not submitted_first else None, submit(self, *args, **kwargs))[1])
    seeds = [tmp_path / "a.c", tmp_path / "b.c"]
    for n, seed in enumerate(seeds):
        seed.write_text(ORIGINAL + f"\nstatic const int evk_seed_{n} = {n};\n")
    config = load_config(make_config(tmp_path, seeds=[str(s) for s in seeds], budget={"evaluations": 2},
                                     resources={"evaluator": "local", "max_parallel": 1}))
    Search(config, tmp_path / "run", operator_set={"knob-mutation": (KnobMutation(), 1.0)}).run()
    assert submitted_first == [2] and prebuilt[:2] == [s.read_text() for s in seeds]


def test_pool_prebuilds_gpu_candidates_on_cpu_workers():
    from evokernel.evaluation.ray_pool import RayPool
    from evokernel.harness import CheckOptions, profile_of
    from evokernel.harness.build import build

    task = get_task("attention-fwd-cpu")
    pool = RayPool(task.name, CheckOptions(), 1, 1, 0)
    pool.builds_ahead = profile_of("cuda").builds_ahead  # prebuilds as for a GPU task; compiles as C here
    source = ORIGINAL + f"\nstatic const int evk_test_variant = {time.time_ns() % 1_000_000_007};\n"
    try:
        pool.prebuild(source)
        ray.get(pool.builds)
    finally:
        pool.shutdown()
    assert build(source, task.language, task.header).cached


def test_a_seed_with_a_bad_knob_is_refused_before_anything_is_written(tmp_path):
    seed = tmp_path / "seed.c"
    seed.write_text(ORIGINAL.replace("#define BLOCK_K 8 ", "#define BLOCK_K 7 "))
    result = CliRunner().invoke(main, ["run", str(make_config(tmp_path, seeds=[str(seed)])),
                                       "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "seed.c: line 9: knob BLOCK_K has default 7, which is not one of its values" in result.output
    assert not (tmp_path / "runs").exists()


def test_a_seed_that_does_not_compile_is_named_by_its_own_file(tmp_path):
    good, broken = tmp_path / "good.c", tmp_path / "broken.c"
    good.write_text(ORIGINAL)
    broken.write_text(ORIGINAL.replace("return 0;", "retur 0;", 1))
    result = CliRunner().invoke(main, ["run", str(make_config(tmp_path, seeds=[str(good), str(broken)],
                                                              budget={"evaluations": 2})),
                                       "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "rejected: candidate does not compile" in line)
    assert f"{broken}:" in line and "/evk/scratch" not in result.output and "kernel.c" not in result.output


def test_sigterm_stops_the_driver_cleanly_and_the_run_resumes(tmp_path):
    path = make_config(tmp_path, budget={"evaluations": 40})
    runs = tmp_path / "runs"
    driver = subprocess.Popen([sys.executable, "-m", "evokernel.cli", "run", str(path), "--runs-dir", str(runs)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (runs.exists() and any(
                finished_count(d.parent) >= 2 for d in runs.glob("*/lineage.db"))):
            time.sleep(0.1)
        driver.send_signal(signal.SIGTERM)
        output, _ = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 130, output
    assert "continue it with: evokernel run --resume" in output
    (run_dir,) = runs.iterdir()
    with Store(run_dir, readonly=True) as store:
        meta = store.meta()
        assert meta["status"] == "stopped" and "interrupted" in meta["stop_reason"]
        done = store.count("correct", "rejected")
    assert done < 40
    resumed = CliRunner().invoke(main, ["run", "--resume", str(run_dir), "--budget", str(done + 2)])
    assert resumed.exit_code == 0, resumed.output
    with Store(run_dir, readonly=True) as store:
        assert store.count("correct", "rejected") == done + 2 and store.meta()["status"] == "finished"
        assert store.count("pending", "running") == 0


def test_a_crossover_waits_for_a_second_kernel(tmp_path):
    config = load_config(make_config(tmp_path, budget={"evaluations": 4}))
    result = Search(config, tmp_path / "run", operator_set={"knob-crossover": (KnobCrossover(), 5.0),
                                                             "knob-mutation": (KnobMutation(), 1.0)}).run()
    rows = finished_rows(tmp_path / "run")
    assert result.stats.evaluations == 4 and rows[1].operator == "knob-mutation"  # one kernel: no crossover
    assert not [op for op, _ in result.stats.proposal_failures if op == "knob-crossover"]  # never a kernel crossed with itself

    alone = Search(config, tmp_path / "alone", operator_set={"knob-crossover": (KnobCrossover(), 1.0)}).run()
    assert alone.stats.evaluations == 1 and alone.reason == "nothing left to evaluate"


def test_crossover_pairs_only_kernels_with_the_same_knobs(tmp_path):
    """Two seeds with different knob sets (as the Hopper config's two attention seeds): crossover is never
    proposed across them, and crosses variants of one seed two or more knobs apart."""
    other = tmp_path / "other.c"
    other.write_text(ORIGINAL.replace(ENTRY, "#define EVK_EXTRA 1  // @knob 1,2\n" + ENTRY))
    config = load_config(make_config(tmp_path, seeds=[str(get_task("attention-fwd-cpu").original), str(other)],
                                     budget={"evaluations": 10}))
    result = Search(config, tmp_path / "run", operator_set={"knob-crossover": (KnobCrossover(), 5.0),
                                                             "knob-mutation": (KnobMutation(), 1.0)}).run()
    assert result.stats.evaluations == 10
    assert not [op for op, _ in result.stats.proposal_failures if op == "knob-crossover"]  # never two seeds of different knobs
    with Store(tmp_path / "run", readonly=True) as store:
        crossed = [row for row in store.individuals() if row.operator == "knob-crossover"]
        knob_sets = {row.id: set(row.knobs) for row in store.individuals()}
    assert all(knob_sets[row.parent_ids[0]] == knob_sets[row.parent_ids[1]] for row in crossed)


class Unslow:
    """Makes the task's original kernel from the slowed seed: a child with a real gain over the seed."""

    name, arity, uses_llm = "unslow", 1, False

    def __call__(self, parents, context):
        return Proposal(source=ORIGINAL, operator=self.name, parent_ids=[parents[0].id])


def test_the_best_kernel_is_re_timed_against_the_seed_and_the_summary_says_so(tmp_path, capsys):
    from evokernel.cli.run import _print_outcome

    slow = tmp_path / "slow.c"
    slow.write_text(ORIGINAL.replace(ENTRY, ENTRY + "  for (volatile int spin = 0; spin < 300000; spin++) {}\n"))
    config = load_config(make_config(tmp_path, seeds=[str(slow)], budget={"evaluations": 2}))
    result = Search(config, tmp_path / "run", operator_set={"unslow": (Unslow(), 1.0)}).run()
    assert result.status == "finished" and result.best.id == 2
    with Store(tmp_path / "run", readonly=True) as store:
        record = store.meta()["best_recheck"]
    assert (record["id"], record["seed_id"], record["rounds"]) == (2, 1, 21)
    assert record["verdict"] == "gain" and record["low"] > 1 and record["geomean"] > 1.5, record
    quick = get_task("attention-fwd-cpu").scenarios("quick")
    assert [s["name"] for s in record["scenarios"]] == [s.name for s in quick]
    capsys.readouterr()
    _print_outcome(result, tmp_path / "run", "original")
    out = capsys.readouterr().out
    assert "the seed (individual 1) in the search" in out and "re-timed against seed #1 (21 rounds)" in out
    assert "a gain beyond the noise" in out

    resumed = Search(config, tmp_path / "run", resume=True).run()  # nothing new: not re-timed again
    with Store(tmp_path / "run", readonly=True) as store:
        assert store.meta()["best_recheck"]["at"] == record["at"] and resumed.best.id == 2


def test_with_several_seeds_the_best_is_compared_with_the_fastest_seed(tmp_path, capsys):
    """Two seeds, the slower one first: the child's gain and its re-timing are against the faster seed
    (over the slower one any kernel of the search would look like a gain)."""
    from evokernel.cli.run import _print_outcome

    slow, slower = tmp_path / "slow.c", tmp_path / "slower.c"
    slower.write_text(ORIGINAL.replace(ENTRY, ENTRY + "  for (volatile int spin = 0; spin < 600000; spin++) {}\n"))
    slow.write_text(ORIGINAL.replace(ENTRY, ENTRY + "  for (volatile int spin = 0; spin < 150000; spin++) {}\n"))
    config = load_config(make_config(tmp_path, seeds=[str(slower), str(slow)], budget={"evaluations": 3}))
    result = Search(config, tmp_path / "run", operator_set={"unslow": (Unslow(), 1.0)}).run()
    assert result.best.id == 3 and (result.stats.seed_id, result.stats.seed_fitness) == (2, finished_rows(
        tmp_path / "run")[1].fitness)
    with Store(tmp_path / "run", readonly=True) as store:
        assert store.meta()["best_recheck"]["seed_id"] == 2
    capsys.readouterr()
    _print_outcome(result, tmp_path / "run", "original")
    out = capsys.readouterr().out
    assert "the seed (individual 2) in the search" in out and "re-timed against seed #2" in out


@pytest.mark.parametrize("resources, message", [
    ({"cpus_per_evaluation": 64}, "field 'resources.cpus_per_evaluation': 64 CPUs per evaluation, and the Ray "
                                  "cluster has 2"),
    ({"max_parallel": 3}, "field 'resources.max_parallel': 3 evaluations at once of 1 CPUs each need 3 CPUs, and "
                          "the Ray cluster has 2"),
])
def test_resources_beyond_the_cluster_are_one_line_at_start(tmp_path, resources, message):
    path = make_config(tmp_path, resources={"evaluation_timeout_s": 30, **resources})
    started = time.time()
    result = CliRunner().invoke(main, ["run", str(path), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error")]
    assert errors == [f"error: {message}"] and "Traceback" not in result.output
    assert time.time() - started < 60


class Slowed:
    """The parent with a busy loop in its entry (a new kernel every time): clearly slower than the best."""

    name, arity, uses_llm = "slowed", 1, False

    def __init__(self) -> None:
        self.made = 0

    def __call__(self, parents, context):
        self.made += 1
        spin = f"  for (volatile int spin = 0; spin < {300000 + self.made}; spin++) {{}}\n"
        return Proposal(source=ORIGINAL.replace(ENTRY, ENTRY + spin), operator=self.name, parent_ids=[parents[0].id])


@pytest.mark.parametrize("reuse", [600, None])
def test_children_far_below_the_best_are_screened_against_reused_reference_times(tmp_path, reuse):
    """With `reference_reuse_s`, the seed is timed interleaved and the slower children are screened alone
    against its reference times; the best fitness always comes from an interleaved timing. Without it,
    nothing is screened."""
    # No re-check of a suspicious gain: two slowed children screened on a loaded machine were once 1.5x apart, and
    # the re-check (timed interleaved, as it must be) then stood in the place of a screening.
    config = load_config(make_config(tmp_path, budget={"evaluations": 4}, reference_reuse_s=reuse,
                                     triggers={"suspicious_gain": 100}))
    result = Search(config, tmp_path / "run", operator_set={"slowed": (Slowed(), 1.0)}, retime_best=False).run()
    with Store(tmp_path / "run", readonly=True) as store:
        rows = [store.individual(row.id) for row in store.individuals()]
        best = store.best(1)[0]
    assert len(rows) == 4 and all(row.status == "correct" for row in rows)
    screened = [row for row in rows if row.report["reference_reused"]]
    assert not best.report["reference_reused"]
    assert result.stats.screened == len(screened)
    if reuse is None:
        assert not screened
    else:
        assert {row.operator for row in screened} == {"slowed"} and len(screened) == 3, \
            [(row.id, row.fitness, row.report["reference_reused"]) for row in rows]
        assert all(row.fitness < 0.97 * best.fitness for row in screened)
        shown = CliRunner().invoke(main, ["show", str(tmp_path / "run"), str(screened[0].id)])
        assert shown.exit_code == 0 and "screened: timed alone" in shown.output, shown.output
    as_json = CliRunner().invoke(main, ["show", str(tmp_path / "run"), str(rows[-1].id), "--json"])
    assert json.loads(as_json.output)["reference_reused"] is (reuse is not None)
