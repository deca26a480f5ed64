"""CPU backend: fp32 numpy buffers, a float64 reference, wall-clock timing with a cache flush."""

from __future__ import annotations

import ctypes
import math
import os
import platform
import time

import numpy as np

from evokernel.harness import values
from evokernel.harness.backends import (CANARY, GUARD_ELEMENTS, AttentionParams, Inputs, load_entry,
                                           shapes, tensor_seed)
from evokernel.harness.tasks import Scenario

FLUSH_BYTES = 32 << 20


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scenario: Scenario, scale: float,
                        dtype) -> np.ndarray:
    """Plain attention in `dtype`; layout [batch, seqlen, heads, head_dim]; masked rows give zeros."""
    s = scenario
    group = s.heads_q // s.heads_kv
    qt = q.astype(dtype).transpose(0, 2, 1, 3)  # b h s d
    kt = np.repeat(k.astype(dtype).transpose(0, 2, 1, 3), group, axis=1)
    vt = np.repeat(v.astype(dtype).transpose(0, 2, 1, 3), group, axis=1)
    scores = (qt @ kt.transpose(0, 1, 3, 2)) * dtype(scale)
    if s.causal:
        rows = np.arange(s.seqlen_q)[:, None] + (s.seqlen_k - s.seqlen_q)
        scores = np.where(np.arange(s.seqlen_k)[None, :] <= rows, scores, -np.inf)
    peak = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = weights.sum(axis=-1, keepdims=True)
    out = np.where(total > 0, (weights @ vt) / np.where(total > 0, total, 1), 0)
    return out.transpose(0, 2, 1, 3).astype(dtype)


def _guarded(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A buffer with canary bands before and after, and the tensor view between them."""
    size = math.prod(shape)
    buffer = np.full(size + 2 * GUARD_ELEMENTS, CANARY, dtype=np.float32)
    return buffer, buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + size].reshape(shape)


class Backend:
    def __init__(self) -> None:
        self.flush = np.zeros(FLUSH_BYTES // 4, dtype=np.float32)

    def device_name(self) -> str:
        return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"

    def load(self, path):
        return load_entry(path, [ctypes.POINTER(AttentionParams)])

    def baseline(self, name: str):
        raise ValueError(f"the CPU backend has no library baseline '{name}'")

    def supports(self, fn, inputs: Inputs) -> bool:
        return True

    def make_inputs(self, scenario: Scenario, seed: int, distribution: str, scale: float) -> Inputs:
        buffers, views = {}, {}
        for name, shape in shapes(scenario).items():
            buffers[name], views[name] = _guarded(shape)
            if name == "o":
                views[name].fill(np.nan)
            else:
                index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
                views[name][...] = values.numpy_draw(index, tensor_seed(seed, name), distribution)
        return Inputs(scenario, scale, *views.values(), guarded=tuple(buffers.values()))

    def roll_inputs(self, inputs: Inputs, base: Inputs, offsets: tuple[int, int, int]) -> None:
        """New input values for a timed call: `base` rolled along the sequence (outside the timed region)."""
        for target, source, roll in zip((inputs.q, inputs.k, inputs.v), (base.q, base.k, base.v), offsets):
            target[...] = np.roll(source, roll, axis=1)

    def head_slices(self, inputs: Inputs, b: int, h: int, rows: list[int]) -> tuple[np.ndarray, ...]:
        """q rows, k and v of one head, and the candidate's output rows, as host arrays."""
        kv_head = inputs.scenario.kv_head(h)
        return (inputs.q[b, rows, h], inputs.k[b, :, kv_head], inputs.v[b, :, kv_head],
                inputs.o[b, rows, h].astype(np.float64))

    def guards_intact(self, inputs: Inputs) -> str | None:
        """Name of the first buffer whose guard bands changed (a write out of bounds), else None."""
        for name, buffer in zip("qkvo", inputs.guarded):
            if not (np.all(buffer[:GUARD_ELEMENTS] == CANARY) and np.all(buffer[-GUARD_ELEMENTS:] == CANARY)):
                return name
        return None

    def snapshot(self, inputs: Inputs) -> tuple:
        return inputs.q.copy(), inputs.k.copy(), inputs.v.copy()

    def unchanged(self, inputs: Inputs, snapshot: tuple) -> bool:
        return all(np.array_equal(a, b) for a, b in zip((inputs.q, inputs.k, inputs.v), snapshot))

    def poison_output(self, inputs: Inputs) -> None:
        inputs.o.fill(np.nan)  # unwritten elements stay NaN

    def call(self, fn, inputs: Inputs) -> int:
        params = inputs.params(lambda a: a.ctypes.data)
        return fn(ctypes.byref(params))

    def run(self, fn, inputs: Inputs) -> tuple[int, np.ndarray]:
        self.poison_output(inputs)
        rc = self.call(fn, inputs)
        return rc, inputs.o.astype(np.float64)

    def time_call(self, fn, inputs: Inputs) -> float:
        self.flush += 1.0  # evict the inputs from the caches
        start = time.perf_counter()
        self.call(fn, inputs)
        return (time.perf_counter() - start) * 1e3

    def reference(self, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
        args = (inputs.q, inputs.k, inputs.v, inputs.scenario, inputs.scale)
        return attention_reference(*args, np.float64), attention_reference(*args, np.float32).astype(np.float64)

    def count_nonfinite(self, x: np.ndarray) -> int:
        return int(x.size - np.count_nonzero(np.isfinite(x)))

    def max_abs_diff(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(np.max(np.abs(a - b)))

    def relative_error(self, out: np.ndarray, ref: np.ndarray) -> float:
        return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))

    def audit(self, fn, inputs: Inputs) -> str | None:
        return None  # the static guard refuses threads that outlive the call

    def release(self, inputs: Inputs) -> None:
        for buffer in inputs.guarded:
            buffer.fill(np.nan)  # a kernel that kept a pointer reads NaN from now on
