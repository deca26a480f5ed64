"""The Hopper attention experiment: its seed kernel, knobs and config (GPU parts skip without a GPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evokernel.config import load_config
from evokernel.builtin_tasks import ATTENTION_SEEDS
from evokernel.defaults import default_config_path
from evokernel.harness import CheckOptions, check_kernel, check_source, get_task, guard
from evokernel.harness.build import build
from evokernel.source import parse_knobs, set_knobs

ROOT = Path(__file__).parents[1]
SEED = ATTENTION_SEEDS / "attention_fa2.cu"
TASK = get_task("attention-fwd")


def test_seed_knobs_cover_every_head_dim_and_defaults_are_allowed():
    knobs = parse_knobs(SEED.read_text())
    for head_dim in (64, 128, 256):
        assert {f"WARPS_HD{head_dim}", f"BLOCK_N_HD{head_dim}", f"STAGES_HD{head_dim}"} <= set(knobs)
    assert all(k.value in k.values for k in knobs.values())
    assert sum(len(k.values) > 1 for k in knobs.values()) >= 10


def test_seed_passes_the_static_guard():
    assert guard.check_source(SEED.read_text(), TASK.language, TASK.header_file, TASK.entry) is None


HOPPER_SEED = ROOT / "evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu"


@pytest.mark.parametrize("config, seeds", [(ROOT / "experiments/attention_hopper/config.yaml", [SEED, HOPPER_SEED]),
                                           (default_config_path(gpu=True), [SEED])])
def test_configs_are_valid_and_point_at_the_seeds(config, seeds):
    """The Hopper experiment searches from both seeds; the embedded GPU default (any CUDA GPU) from the
    FA2-style one only, as the Hopper seed needs sm_90a."""
    loaded = load_config(config)
    assert loaded.task == "attention-fwd" and loaded.speed_reference == "cudnn"
    assert [p.resolve() for p in loaded.seeds] == [p.resolve() for p in seeds]
    assert {s.head_dim for s in TASK.scenarios(loaded.scenarios)} == {64, 128, 256}


def knob_value_variants(source: str) -> list[str]:
    """Sources that together give every knob every one of its allowed values (variant i takes value i mod n)."""
    knobs = parse_knobs(source)
    count = max(len(k.values) for k in knobs.values())
    return [set_knobs(source, {k.name: k.values[i % len(k.values)] for k in knobs.values()}) for i in range(count)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_seed_compiles_without_spills_and_every_knob_value_compiles():
    seed = build(SEED.read_text(), TASK.language, TASK.header)
    assert seed.ok, seed.log[-2000:]
    assert "bytes stack frame" in seed.log and " 0 bytes spill" in seed.log
    assert all(line.startswith("    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads")
               for line in seed.log.splitlines() if "bytes stack frame" in line)
    for variant in knob_value_variants(SEED.read_text()):
        result = build(variant, TASK.language, TASK.header)
        assert result.ok, result.log[-2000:]


@pytest.mark.gpu
def test_every_knob_value_of_the_seed_is_correct():
    for variant in knob_value_variants(SEED.read_text()):
        report = check_source(variant, TASK, CheckOptions(scenario_set="quick", time_kernels=False))
        assert report.correct, report.failure


@pytest.mark.gpu
def test_seed_is_correct_and_faster_than_the_original():
    report = check_kernel(SEED, TASK, CheckOptions(scenario_set="quick", rounds=5))
    assert report.correct, report.failure
    assert report.geomean_speedup > 3
