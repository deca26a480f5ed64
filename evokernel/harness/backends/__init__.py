"""Backends: how kernels of one kind are loaded, fed, run, timed and compared on one device.

Each backend module defines a class `Backend` with the methods the worker calls:
`load`, `baseline`, `supports`, `make_inputs`, `roll_inputs`, `snapshot`, `unchanged`, `run`, `call`,
`time_call`, `reference`, `rows`, `reference_rows`, `guards_intact`, `audit`, `release`, `device_name`.
A new device kind is one new file.

Inputs come from `values` (a counter-based hash) so the parent can regenerate any of them; every
tensor sits between guard bands (canary values) that a kernel writing out of bounds changes.
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from evokernel.harness import values
from evokernel.harness.tasks import Scenario

GUARD_ELEMENTS = 4096  # canary elements before and after every tensor (8-16 KiB: beyond small overruns)
CANARY = 1234.5  # exactly representable in bf16 and fp32
ROWS_CHECKED = 2  # output rows compared on every timed call


class AttentionParams(ctypes.Structure):
    """Mirror of evk_attention_params (both tasks share the layout; pointers are untyped here)."""

    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("causal", ctypes.c_int), ("softmax_scale", ctypes.c_float),
    ]


@dataclass
class Inputs:
    """One problem instance on the device: q, k, v, the output buffer (views inside guarded buffers),
    the buffers themselves, and the scale to use."""

    scenario: Scenario
    scale: float
    q: Any
    k: Any
    v: Any
    o: Any
    guarded: tuple  # the whole buffers, guard bands included, in the order q, k, v, o

    def params(self, pointer_of) -> AttentionParams:
        s = self.scenario
        return AttentionParams(pointer_of(self.q), pointer_of(self.k), pointer_of(self.v), pointer_of(self.o),
                               s.batch, s.heads_q, s.heads_kv, s.seqlen_q, s.seqlen_k, s.head_dim,
                               int(s.causal), self.scale)


def shapes(s: Scenario) -> dict[str, tuple[int, ...]]:
    """Layout [batch, seqlen, heads, head_dim] of q, k, v and o."""
    return {"q": (s.batch, s.seqlen_q, s.heads_q, s.head_dim), "k": (s.batch, s.seqlen_k, s.heads_kv, s.head_dim),
            "v": (s.batch, s.seqlen_k, s.heads_kv, s.head_dim), "o": (s.batch, s.seqlen_q, s.heads_q, s.head_dim)}


def tensor_seed(seed: int, name: str) -> int:
    return values.mix(seed, "qkv".index(name) + 1)


def call_offsets(scenario: Scenario, seed: int, calls: int) -> list[tuple[int, int, int]]:
    """Rolls along the sequence of q, k and v for each timed call: no two calls see the same inputs
    (k and v never rolled alike, which would leave a non-causal output unchanged)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int, int]] = set()
    offsets = []
    for _ in range(calls):
        for _attempt in range(1000):
            candidate = (rng.randrange(scenario.seqlen_q), rng.randrange(scenario.seqlen_k),
                         rng.randrange(scenario.seqlen_k))
            if candidate not in seen and (candidate[1] != candidate[2] or scenario.seqlen_k == 1):
                break
        seen.add(candidate)
        offsets.append(candidate)
    return offsets


def pick_rows(scenario: Scenario, seed: int) -> tuple[int, int, list[int]]:
    """(batch, head, query rows) whose outputs are compared: one head, so the parent regenerates one K/V."""
    rng = random.Random(seed ^ 0x5EED)
    rows = sorted({rng.randrange(scenario.seqlen_q) for _ in range(ROWS_CHECKED)})
    return rng.randrange(scenario.batch), rng.randrange(scenario.heads_q), rows


def attention_rows(q_rows: np.ndarray, k: np.ndarray, v: np.ndarray, rows: list[int], scenario: Scenario,
                   scale: float) -> np.ndarray:
    """float64 attention for query rows `rows` of one head: q_rows [R, D], k and v [Sk, D]."""
    scores = (q_rows.astype(np.float64) @ k.astype(np.float64).T) * scale
    if scenario.causal:
        limit = np.asarray(rows)[:, None] + (scenario.seqlen_k - scenario.seqlen_q)
        scores = np.where(np.arange(scenario.seqlen_k)[None, :] <= limit, scores, -np.inf)
    peak = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = weights.sum(axis=1, keepdims=True)
    return np.where(total > 0, (weights @ v.astype(np.float64)) / np.where(total > 0, total, 1), 0)


def regenerated_rows(scenario: Scenario, seed: int, distribution: str, scale: float,
                     offsets: tuple[int, int, int], bfloat16: bool) -> tuple[list[int], np.ndarray]:
    """The reference rows the parent computes on its own, from the seed alone: the same values the worker
    drew (and rolled by `offsets`), without anything the worker reported. Returns (rows, reference)."""
    s = scenario
    b, h, rows = pick_rows(s, values.mix(seed, *offsets))
    kv_head = s.kv_head(h)
    dims = np.arange(s.head_dim)

    def fetch(name: str, positions: np.ndarray, head: int, heads: int, length: int, roll: int) -> np.ndarray:
        source = (positions - roll) % length  # what a roll by `roll` put at `positions`
        index = ((b * length + source[:, None]) * heads + head) * s.head_dim + dims[None, :]
        drawn = values.numpy_draw(index, tensor_seed(seed, name), distribution)
        return values.round_to_bfloat16(drawn) if bfloat16 else drawn

    q = fetch("q", np.asarray(rows), h, s.heads_q, s.seqlen_q, offsets[0])
    keys = np.arange(s.seqlen_k)
    k = fetch("k", keys, kv_head, s.heads_kv, s.seqlen_k, offsets[1])
    v = fetch("v", keys, kv_head, s.heads_kv, s.seqlen_k, offsets[2])
    return rows, attention_rows(q, k, v, rows, s, scale)


def load_entry(path, argtypes: list) -> ctypes._CFuncPtr:
    """Load `evk_attention_fwd` from a built shared object (a private handle per path)."""
    library = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
    entry = library.evk_attention_fwd
    entry.argtypes = argtypes
    entry.restype = ctypes.c_int
    return entry
