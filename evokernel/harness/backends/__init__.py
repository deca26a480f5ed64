"""Backends: how built kernels are loaded, fed, called and timed on one kind of device.

A backend knows devices, not problems: the task says which tensors and scalars a kernel takes
(`Task.arguments`), and the backend allocates them (each between guard bands of canary values that a
kernel writing out of bounds changes), fills the inputs from `values` (so the parent can regenerate
any of them), poisons the outputs, passes everything in one struct to the entry point, and times the
call. Each backend module defines a class `Backend` with the methods the worker calls:
`device_name`, `load`, `make_inputs`, `like`, `roll_inputs`, `gather`, `faults`, `snapshot`,
`unchanged`, `poison_outputs`, `run`, `batch_size`, `time_calls`, `overhead_ms`, `count_nonfinite`, `max_abs_diff`,
`relative_error`, `release`, and where its runners are worth starting ahead, `start_runners`. A new device
kind is one new file. Shared by all of them: `Inputs`, `Fault`, `parameter_struct`, `canary`, `poison`, and
`single_call_ms` (a kernel's first estimate, from which the calls a timed request holds follow).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from evokernel.harness.task import Scalar, Tensor

GUARD_ELEMENTS = 4096  # canary elements before and after every tensor (8-16 KiB: beyond small overruns)
CANARY = 1234.5  # exactly representable in bf16, fp16 and fp32
SCALAR_CTYPES = {"int": ctypes.c_int, "int64": ctypes.c_int64, "float": ctypes.c_float, "double": ctypes.c_double}
ESTIMATE_TRIES = 3  # requests of one call at most, for a kernel's first estimate (`single_call_ms`)
RETRY_BELOW_MS = 20.0  # a first estimate above this is a slow kernel's: not repeated


@dataclass(frozen=True)
class Fault:
    """What a call left wrong in its buffers: the first tensor whose guard bands changed (a write out of bounds),
    or None, and each output's count of elements that are not finite (unwritten outputs stay NaN)."""

    broken_guard: str | None
    nonfinite: dict[str, int]


@dataclass
class Inputs:
    """One call's arguments on the device: the tensors (views inside guarded buffers) by name and the buffers
    themselves (a runner's parameter struct points into its own mapping of them)."""

    scenario: Any
    arguments: list[Tensor | Scalar]
    arrays: dict[str, Any]
    guarded: dict[str, Any]
    memory: Any = None  # the allocation holding the buffers, where a runner maps it (CUDA)
    prepared: dict[str, Any] = field(default_factory=dict)  # what library baselines made of these inputs

    @property
    def input_names(self) -> list[str]:
        return [a.name for a in self.arguments if isinstance(a, Tensor) and not a.output]

    @property
    def output_names(self) -> list[str]:
        return [a.name for a in self.arguments if isinstance(a, Tensor) and a.output]

    def inputs(self) -> dict[str, Any]:
        return {name: self.arrays[name] for name in self.input_names}


@lru_cache(maxsize=256)
def _struct_type(fields: tuple[tuple[str, str | None], ...]) -> type[ctypes.Structure]:
    """One struct type per argument list (field name, scalar C type or None for a pointer)."""

    class Params(ctypes.Structure):
        _fields_ = [(name, ctypes.c_void_p if ctype is None else SCALAR_CTYPES[ctype]) for name, ctype in fields]

    return Params


def parameter_struct(arguments: list[Tensor | Scalar], pointer_of) -> ctypes.Structure:
    """The entry's parameter struct: a pointer per tensor and each scalar by value, in the listed order."""
    fields = tuple((a.name, None if isinstance(a, Tensor) else a.ctype) for a in arguments)
    values = [pointer_of(a.name) if isinstance(a, Tensor) else a.value for a in arguments]
    return _struct_type(fields)(*values)


def canary(buffer) -> float | int:
    """CANARY as `buffer` holds it: 1234 in an index input's buffer. A Python number, compared without a copy to
    the device, and cast to the buffer's type as it was when written (bf16 rounds it the same way both times)."""
    floating = buffer.is_floating_point() if hasattr(buffer, "is_floating_point") else buffer.dtype.kind == "f"
    return CANARY if floating else int(CANARY)


def poison(buffer) -> float:
    """What a released buffer is filled with, so that a kernel that kept a pointer reads no stale answer: NaN,
    or -1 in an index input's buffer."""
    floating = buffer.is_floating_point() if hasattr(buffer, "is_floating_point") else buffer.dtype.kind == "f"
    return float("nan") if floating else -1  # (a torch tensor, or a numpy array)


def single_call_ms(backend, kernel, inputs) -> float:
    """A kernel's time in a request of one call, round trip included: the least of up to ESTIMATE_TRIES requests
    while it looks too long to batch yet is cheap to repeat. On a busy machine a 17 us kernel's one request took
    over 1.3 ms once, and its scenario was then timed one call a request, mostly round trip (spread 14x)."""
    times = [backend.time_calls(kernel, [inputs])]
    while len(times) < ESTIMATE_TRIES and backend.batch_size(min(times)) == 1 and min(times) < RETRY_BELOW_MS:
        times.append(backend.time_calls(kernel, [inputs]))
    return min(times)
