"""Embedded default run configs, used by `evokernel run` without a CONFIG argument: `gpu.yaml`
(the attention task on a CUDA GPU) when one is present, else `cpu.yaml` (the CPU attention task,
which runs on any laptop in a few minutes). Interface: `default_config_path`.
"""

from __future__ import annotations

from pathlib import Path

DEFAULTS_DIR = Path(__file__).parent


def default_config_path(gpu: bool | None = None) -> Path:
    """The embedded config for this machine (`gpu` None: detect a CUDA GPU)."""
    if gpu is None:
        from evokernel.evaluation import detect_gpus

        gpu = detect_gpus() > 0
    return DEFAULTS_DIR / ("gpu.yaml" if gpu else "cpu.yaml")
