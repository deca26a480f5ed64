"""Input values from a counter-based hash, so that the worker (numpy or torch on a GPU) and the parent
(numpy) make bit-identical inputs from a seed: the parent regenerates any element it wants and checks
sampled outputs itself, without trusting anything the worker (which runs candidate code) reports.

Every operation below is exact in integer arithmetic or a single IEEE-rounded float32 operation, so
numpy arrays and torch tensors (CPU or CUDA) give the same numbers. Values are uniform with unit
variance ("normal") or scaled by 2 and shifted by 0.5 ("shifted": large logits exercise the softmax's
maximum subtraction).
"""

from __future__ import annotations

import numpy as np

MASK31 = (1 << 31) - 1
SQRT12 = np.float32(3.4641016)
TWO_TO_MINUS_24 = np.float32(1.0 / (1 << 24))
DISTRIBUTIONS = ("normal", "shifted")


def mix(*parts: int) -> int:
    """A 31-bit seed from integers (scenario index, call number, tensor...): the same on both sides."""
    x = 0x2545F491
    for part in parts:
        x = ((x ^ (part & MASK31)) * 1103515245 + 12345) & MASK31
        x ^= x >> 13
    return x


def _hash(index, seed: int):
    """31-bit hash of int64 indices (< 2**31); all products stay below 2**62."""
    x = (index ^ seed) & MASK31
    x = (x * 1103515245 + 12345) & MASK31
    x = x ^ (x >> 13)
    x = (x * 214013 + 2531011) & MASK31
    x = x ^ (x >> 17)
    x = (x * 1664525 + 1013904223) & MASK31
    return x ^ (x >> 15)


def draw(index, seed: int, distribution: str, to_float32):
    """float32 values for int64 `index` (numpy array or torch tensor); `to_float32` converts integers."""
    u = to_float32(_hash(index, seed) >> 7) * TWO_TO_MINUS_24  # 24 bits: exact in float32
    values = (u - np.float32(0.5)) * SQRT12
    if distribution == "shifted":
        values = values * np.float32(2.0) + np.float32(0.5)
    elif distribution != "normal":
        raise ValueError(f"unknown distribution {distribution!r}")
    return values


def numpy_draw(index: np.ndarray, seed: int, distribution: str) -> np.ndarray:
    return draw(index.astype(np.int64), seed, distribution, lambda x: x.astype(np.float32))


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), kept as float32: what torch's .to(bfloat16) gives."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)
