"""Input values from a counter-based hash, so that the worker (numpy or torch on a GPU) and the parent
(numpy) make bit-identical inputs from a seed: the parent regenerates any element it wants and checks
sampled outputs itself, without trusting anything the worker (which runs candidate code) reports.

Every operation below is exact in integer arithmetic or a single IEEE-rounded float32 operation, so
numpy arrays and torch tensors (CPU or CUDA) give the same numbers. Values are uniform with unit
variance ("normal") or scaled by 2 and shifted by 0.5 ("shifted": large logits exercise the softmax's
maximum subtraction). An index input (`Tensor.indices`) holds integers uniform in [0, high) instead, the
same in every distribution.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from evokernel.harness.task import Indices, Tensor

MASK31 = (1 << 31) - 1
SQRT12 = np.float32(3.4641016)
TWO_TO_MINUS_24 = np.float32(1.0 / (1 << 24))
DISTRIBUTIONS = ("normal", "shifted")
INDEX_NUMPY_TYPES = {"int64": np.int64, "int": np.int32}  # by Indices.ctype


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


def draw_indices(index, seed: int, high: int):
    """Integers uniform in [0, high) for int64 `index` (numpy array or torch tensor; exact in both). The hash
    has 31 bits, so for any table a task holds the modulo's bias is below 2**-11."""
    return _hash(index, seed) % high


def numpy_type(tensor: Tensor, float_type) -> type:
    """The numpy element type of `tensor`'s buffer: its index type, else the task's `float_type`."""
    return INDEX_NUMPY_TYPES[tensor.indices.ctype] if tensor.indices else float_type


def numpy_input(indices: Indices | None, index: np.ndarray, seed: int, distribution: str) -> np.ndarray:
    """The values an input holds at int64 `index`: `indices` where it is an index input (`Tensor.indices`),
    else float32 draws."""
    if indices:
        return draw_indices(index.astype(np.int64), seed, indices.high)
    return numpy_draw(index, seed, distribution)


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), kept as float32: what torch's .to(bfloat16) gives."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def tensor_seed(seed: int, position: int) -> int:
    """The seed of the `position`-th input tensor of a call."""
    return mix(seed, position + 1)


def round_to(dtype: str, x: np.ndarray) -> np.ndarray:
    """float32 values as the kernel sees them in `dtype` (kept as float32)."""
    if dtype == "bfloat16":
        return round_to_bfloat16(x)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    return x


def call_offsets(inputs: list[Tensor], seed: int, calls: int) -> list[tuple[int, ...]]:
    """For each timed call, how far each input is rolled (`Tensor.roll_axis`): no two calls alike, and inputs of
    the same shape and roll never rolled alike (which could leave an output unchanged)."""
    rng = random.Random(seed)
    seen: set[tuple[int, ...]] = set()
    twins = [(a, b) for a in range(len(inputs)) for b in range(a + 1, len(inputs))
             if (inputs[a].shape, inputs[a].roll_axis) == (inputs[b].shape, inputs[b].roll_axis)
             and inputs[a].roll_positions > 1]
    offsets = []
    for _ in range(calls):
        for _attempt in range(1000):
            candidate = tuple(rng.randrange(t.roll_positions) for t in inputs)
            if candidate not in seen and all(candidate[a] != candidate[b] for a, b in twins):
                break
        seen.add(candidate)
        offsets.append(candidate)
    return offsets


def rolled_source(shape: tuple[int, ...], axis: int | None, roll: int, flat: np.ndarray) -> np.ndarray:
    """Flat indices of the drawn tensor whose values a roll by `roll` (along `axis`; None: of the flat array) put
    at `flat`."""
    if axis is None:
        return (flat - roll) % math.prod(shape)
    position = list(np.unravel_index(flat, shape))
    position[axis] = (position[axis] - roll) % shape[axis]
    return np.ravel_multi_index(tuple(position), shape).astype(np.int64)


def regenerated_fetch(shapes: dict[str, tuple[tuple[int, ...], int]], seed: int, distribution: str, dtype: str,
                      offsets: tuple[int, ...], indices: dict[str, Indices] | None = None):
    """`fetch(name, flat)`: the values input `name` (shape, roll axis; `indices` where it is an index input) held
    at flat indices `flat` in the call made from `seed` (rolled by `offsets`), recomputed from the seed alone,
    as float64."""
    positions = {name: position for position, name in enumerate(shapes)}
    indices = indices or {}

    def fetch(name: str, flat) -> np.ndarray:
        shape, axis = shapes[name]
        source = rolled_source(shape, axis, offsets[positions[name]], np.asarray(flat, dtype=np.int64))
        drawn = numpy_input(indices.get(name), source, tensor_seed(seed, positions[name]), distribution)
        return (drawn if name in indices else round_to(dtype, drawn)).astype(np.float64)

    return fetch
