"""`rmsnorm-cpu`: fused RMSNorm with a residual add, fp32, C with OpenMP.

An example of a task written outside the package: the ABI header, the original kernel and this file
are the whole task (`evokernel check KERNEL --task examples/tasks/rmsnorm_cpu`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from evokernel.harness.task import Scalar, Task, Tensor

EPS = 1e-6
ELEMENTS_CHECKED = 64  # elements of one row compared on every timed call, in each output


@dataclass(frozen=True)
class Shape:
    rows: int
    hidden: int

    @property
    def name(self) -> str:
        return f"r{self.rows}-h{self.hidden}"


def rmsnorm(x: np.ndarray, residual: np.ndarray, weight: np.ndarray, dtype) -> dict[str, np.ndarray]:
    """Both outputs computed in `dtype` (numpy), returned as float64."""
    h = x.astype(dtype) + residual.astype(dtype)
    inv = 1 / np.sqrt(np.mean(h * h, axis=-1, keepdims=True, dtype=dtype) + dtype(EPS))
    out = h * inv * weight.astype(dtype)
    return {"out": out.astype(np.float64), "residual_out": h.astype(np.float64)}


class RMSNormCpu(Task):
    name = "rmsnorm-cpu"
    description = "fused residual add + RMSNorm, fp32, C with OpenMP (evk_rmsnorm_cpu.h)"
    language = "c"
    header_file = "evk_rmsnorm_cpu.h"
    original_file = "original.c"
    entry = "evk_rmsnorm"
    dtype = "float32"
    scenario_type = Shape
    tolerance_floor = 2e-5  # float32 sums over thousands of elements, in any order
    peak_flops = 2.0e12  # far above what a few CPU cores reach
    peak_bytes_per_s = 1.0e12
    scenario_sets = {
        "quick": (Shape(7, 64), Shape(33, 1000), Shape(1, 768)),
        "models": tuple(Shape(64, hidden) for hidden in (768, 2048, 4096)),
        "ragged": (Shape(1, 4096), Shape(5, 97), Shape(129, 1536), Shape(3, 1)),
    }

    def arguments(self, s: Shape) -> list[Tensor | Scalar]:
        return [Tensor("x", (s.rows, s.hidden)), Tensor("residual", (s.rows, s.hidden)),
                Tensor("weight", (s.hidden,)),
                Tensor("out", (s.rows, s.hidden), output=True), Tensor("residual_out", (s.rows, s.hidden), output=True),
                Scalar("rows", "int", s.rows), Scalar("hidden", "int", s.hidden), Scalar("eps", "float", EPS)]

    def reference(self, arrays: dict, s: Shape, precise: bool) -> dict:
        return rmsnorm(arrays["x"], arrays["residual"], arrays["weight"], np.float64 if precise else np.float32)

    def flops(self, s: Shape) -> float:
        return 4.0 * s.rows * s.hidden  # add, square-accumulate, two multiplies

    def sample(self, s: Shape, rng: random.Random) -> dict[str, np.ndarray]:
        """Elements of one row: the row's mean square is computed once for all of them."""
        row = rng.randrange(s.rows)
        columns = sorted({rng.randrange(s.hidden) for _ in range(ELEMENTS_CHECKED)})
        flat = np.asarray(columns, dtype=np.int64) + row * s.hidden
        return {"out": flat, "residual_out": flat}

    def reference_at(self, s: Shape, picks: dict[str, np.ndarray], fetch) -> dict[str, np.ndarray]:
        row, columns = divmod(picks["out"], s.hidden)
        whole_row = row[0] * s.hidden + np.arange(s.hidden)
        values = rmsnorm(fetch("x", whole_row), fetch("residual", whole_row), fetch("weight", np.arange(s.hidden)),
                         np.float64)
        return {name: row_values[columns] for name, row_values in values.items()}
