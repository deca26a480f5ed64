"""The Hopper attention experiment: its seed kernel, knobs and config (GPU parts skip without a GPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evokernel.config import load_config
from evokernel.defaults import DEFAULTS_DIR, default_config_path
from evokernel.harness import CheckOptions, check_kernel, get_task, guard
from evokernel.harness.build import build
from evokernel.mutations.knobs import parse_knobs, set_knobs

ROOT = Path(__file__).parents[1]
SEED = DEFAULTS_DIR / "attention_fa2.cu"
TASK = get_task("attention-fwd")


def test_seed_knobs_cover_every_head_dim_and_defaults_are_allowed():
    knobs = parse_knobs(SEED.read_text())
    for head_dim in (64, 128, 256):
        assert {f"WARPS_HD{head_dim}", f"BLOCK_N_HD{head_dim}", f"STAGES_HD{head_dim}"} <= set(knobs)
    assert all(k.value in k.values for k in knobs.values())
    assert sum(len(k.values) > 1 for k in knobs.values()) >= 10


def test_seed_passes_the_static_guard():
    assert guard.check_source(SEED.read_text(), TASK.language, TASK.header.name) is None


@pytest.mark.parametrize("config", [ROOT / "experiments/attention_hopper/config.yaml", default_config_path(gpu=True)])
def test_configs_are_valid_and_point_at_the_seed(config):
    loaded = load_config(config)
    assert loaded.task == "attention-fwd" and loaded.speed_reference == "cudnn"
    assert [p.resolve() for p in loaded.seeds] == [SEED.resolve()]
    assert {s.head_dim for s in TASK.scenarios(loaded.scenarios)} == {64, 128, 256}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_seed_and_a_knob_variant_compile_without_spills():
    for source in (SEED.read_text(), set_knobs(SEED.read_text(), {"WARPS_HD128": "8"})):
        result = build(source, TASK.language, TASK.header)
        assert result.ok, result.log[-2000:]
        if result.log:  # a fresh build carries the ptxas report
            assert "spill" not in result.log.replace("0 bytes spill", "")


@pytest.mark.gpu
def test_seed_is_correct_and_faster_than_the_original():
    report = check_kernel(SEED, TASK, CheckOptions(scenario_set="quick", rounds=5))
    assert report.correct, report.failure
    assert report.geomean_speedup > 3
