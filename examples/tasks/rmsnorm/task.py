"""`rmsnorm`: fused RMSNorm with a residual add, bf16, CUDA; speed bar: PyTorch (`--original torch`).

An example of a task written outside the package (`evokernel check KERNEL --task examples/tasks/rmsnorm`).
The scenarios cover the hidden sizes of common models and ragged row counts and hidden sizes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from evokernel.harness.task import Baseline, Scalar, Task, Tensor

EPS = 1e-6
ELEMENTS_CHECKED = 64  # elements of one row compared on every timed call, in each output
# Hidden sizes: BERT/GPT-2, Qwen2-1.5B, Llama-3.2-1B, Qwen2-7B, Llama-3-8B, Llama-2-13B, DeepSeek-V3, Llama-3-70B
MODEL_HIDDEN = (768, 1536, 2048, 3584, 4096, 5120, 7168, 8192)


@dataclass(frozen=True)
class Shape:
    rows: int
    hidden: int

    @property
    def name(self) -> str:
        return f"r{self.rows}-h{self.hidden}"


def _torch_rms_norm(arrays: dict, s: Shape) -> tuple:
    return arrays["x"], arrays["residual"], arrays["weight"]


def _run_torch(prepared: tuple, s: Shape) -> None:
    import torch.nn.functional as F

    x, residual, weight = prepared
    h = x + residual
    F.rms_norm(h, (s.hidden,), weight, EPS)


class RMSNorm(Task):
    name = "rmsnorm"
    description = "fused residual add + RMSNorm, bf16, CUDA (evk_rmsnorm.h)"
    language = "cuda"
    header_file = "evk_rmsnorm.h"
    original_file = "original.cu"
    entry = "evk_rmsnorm"
    dtype = "bfloat16"
    scenario_type = Shape
    tolerance_floor = 1e-3
    peak_flops = 1.0e15
    peak_bytes_per_s = 5.0e12  # H200 HBM3e is 4.8e12
    scenario_sets = {
        "quick": (Shape(7, 768), Shape(333, 4096), Shape(1, 8192)),
        "models": tuple(Shape(4096, hidden) for hidden in MODEL_HIDDEN),
        "decode": tuple(Shape(rows, hidden) for rows in (1, 32) for hidden in (4096, 8192)),
        "ragged": (Shape(1, 1000), Shape(17, 4095), Shape(4097, 5120), Shape(1023, 7168), Shape(65536, 1024),
                   Shape(3, 1)),
    }

    def arguments(self, s: Shape) -> list[Tensor | Scalar]:
        return [Tensor("x", (s.rows, s.hidden)), Tensor("residual", (s.rows, s.hidden)),
                Tensor("weight", (s.hidden,)),
                Tensor("out", (s.rows, s.hidden), output=True), Tensor("residual_out", (s.rows, s.hidden), output=True),
                Scalar("rows", "int", s.rows), Scalar("hidden", "int", s.hidden), Scalar("eps", "float", EPS)]

    def reference(self, arrays: dict, s: Shape, precise: bool) -> dict:
        """fp32 math (`precise`), or everything in bf16 as a plain PyTorch model would do it."""
        import torch
        import torch.nn.functional as F

        dtype = torch.float32 if precise else torch.bfloat16
        h = arrays["x"].to(dtype) + arrays["residual"].to(dtype)
        out = F.rms_norm(h, (s.hidden,), arrays["weight"].to(dtype), EPS)
        return {"out": out.float(), "residual_out": h.float()}

    def flops(self, s: Shape) -> float:
        return 4.0 * s.rows * s.hidden

    def sample(self, s: Shape, rng: random.Random) -> dict[str, np.ndarray]:
        """Elements of one row: the row's mean square is computed once for all of them."""
        row = rng.randrange(s.rows)
        columns = sorted({rng.randrange(s.hidden) for _ in range(ELEMENTS_CHECKED)})
        flat = np.asarray(columns, dtype=np.int64) + row * s.hidden
        return {"out": flat, "residual_out": flat}

    def reference_at(self, s: Shape, picks: dict[str, np.ndarray], fetch) -> dict[str, np.ndarray]:
        row, columns = divmod(picks["out"], s.hidden)
        whole_row = row[0] * s.hidden + np.arange(s.hidden)
        h = fetch("x", whole_row) + fetch("residual", whole_row)
        out = h / np.sqrt(np.mean(h * h) + EPS) * fetch("weight", np.arange(s.hidden))
        return {"out": out[columns], "residual_out": h[columns]}

    def baselines(self) -> dict[str, Baseline]:
        return {"torch": Baseline(_run_torch, _torch_rms_norm)}
