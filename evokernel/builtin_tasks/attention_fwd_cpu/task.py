"""`attention-fwd-cpu`: forward attention on the CPU, fp32, C with OpenMP (evk_attention_cpu.h)."""

from __future__ import annotations

import numpy as np

from evokernel.builtin_tasks.attention import AttentionTask, Scenario, numpy_reference


class AttentionFwdCpu(AttentionTask):
    name = "attention-fwd-cpu"
    description = "forward attention, fp32, C with OpenMP (evk_attention_cpu.h)"
    language = "c"
    header_file = "evk_attention_cpu.h"
    original_file = "original.c"
    dtype = "float32"
    tolerance_floor = 1e-5
    peak_flops = 2.0e12  # far above what a few CPU cores reach in fp32
    peak_bytes_per_s = 1.0e12
    scenario_sets = {
        "quick": (
            Scenario(1, 2, 2, 48, 48, 32, False),
            Scenario(1, 4, 2, 33, 57, 16, True, 0.5),
            Scenario(2, 2, 1, 40, 19, 24, True),
        ),
        "grid": tuple(
            Scenario(b, 128 // d, 128 // d, s, s, d, causal)
            for d in (32, 64) for causal in (False, True) for b, s in ((4, 64), (2, 128), (1, 256))
        ),
        "gqa": (
            Scenario(2, 8, 2, 96, 96, 32, True),
            Scenario(1, 8, 1, 128, 128, 64, False),
        ),
        "ragged": (
            Scenario(2, 2, 2, 77, 131, 40, True, 0.3),
            Scenario(1, 4, 2, 100, 37, 32, True),
            Scenario(3, 2, 2, 1, 65, 64, False),
            Scenario(1, 3, 1, 63, 63, 24, False, 1.7),
        ),
    }

    def reference(self, arrays: dict, s: Scenario, precise: bool) -> dict:
        dtype = np.float64 if precise else np.float32
        return {"o": numpy_reference(arrays["q"], arrays["k"], arrays["v"], s, dtype).astype(np.float64)}
