"""The knob-search comparison in a short form, on a 24-combination corner of the CPU task's recorded table:
the summary has every budget, best-found ratios lie in (0, 1], evokernel's replayed search is the same run
at every budget up to where it stops (what the benchmark relies on), it finds the optimum when the budget
is the whole space, and Kernel Tuner's simulation mode replays the same table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import knob_search_comparison as comparison  # noqa: E402

TABLE = ROOT / "experiments/attention_cpu/knob_table.csv"
CORNER = {"BLOCK_Q": ["1", "2"], "BLOCK_K": ["8", "16", "32"], "THREADS": ["1", "4"]}  # 2*3*2*2 = 24
CONFIG = ROOT / "experiments/attention_cpu/config.yaml"
HAS_KERNEL_TUNER = importlib.util.find_spec("kernel_tuner") is not None  # the `bench` extra
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def table() -> comparison.KnobTable:
    return comparison.KnobTable.load(TABLE, CORNER)


def test_the_corner_is_exhaustive_and_its_seed_lists_only_its_values(table):
    assert table.size == 24 and table.optimum > 0
    assert comparison.parse_knobs(table.seed_source)["BLOCK_K"].values == ("8", "16", "32")


def test_the_summary_has_every_budget_and_ratios_within_0_and_1(tmp_path):
    out = tmp_path / "summary.json"
    restrict = [f"--restrict={name}={','.join(values)}" for name, values in CORNER.items()]
    kernel_tuner = "random_sample" if HAS_KERNEL_TUNER else ""
    plot = ["--plot", str(tmp_path / "p.png")] if HAS_MATPLOTLIB else []
    assert comparison.main(["--table", str(TABLE), *restrict, "--repetitions", "3", "--budgets", "0.25,0.5",
                            "--kernel-tuner", kernel_tuner, "--json", str(out), *plot,
                            "--results", str(tmp_path / "RESULTS.md")]) == 0
    rows = json.loads(out.read_text())["rows"]
    strategies = {"evokernel"} | ({"kt:random_sample"} if HAS_KERNEL_TUNER else set())
    assert {(r["strategy"], r["budget"]) for r in rows} == {(s, b) for s in strategies for b in (6, 12)}
    for row in rows:
        assert 0 < row["q1"] <= row["median"] <= row["q3"] <= 1
        assert row["evaluations_used"] <= row["budget"]
        assert row["reach_95"] == "never" or float(row["reach_95"]) <= row["budget"]
    assert not HAS_MATPLOTLIB or (tmp_path / "p.png").stat().st_size > 0
    assert "| evokernel | 12 (50%) |" in (tmp_path / "RESULTS.md").read_text()


def test_a_smaller_budget_replays_the_start_of_the_larger_run(table, tmp_path):
    search = comparison.EvokernelSearch(table, CONFIG, tmp_path)
    full = search.run(18, seed=5)
    assert search.run(7, seed=5) == full[:7]


def test_evokernel_finds_the_optimum_when_the_budget_is_the_whole_space(table, tmp_path):
    search = comparison.EvokernelSearch(table, CONFIG, tmp_path)
    for seed in range(3):
        run = search.run(table.size, seed)
        assert len(run) == table.size and max(run) == table.optimum


@pytest.mark.skipif(not HAS_KERNEL_TUNER, reason="kernel_tuner is not installed")
def test_kernel_tuner_replays_every_combination_of_the_table(table, tmp_path):
    cache = comparison.write_kernel_tuner_cache(table, tmp_path / "cache.json")
    search = comparison.KernelTunerSearch(table, "random_sample", cache)
    assert sorted(search.run(table.size, seed=0)) == sorted(table.fitness.values())
