"""One record per kind of device: what the harness, the evaluators and the question policy do differently on
it. A new device kind is its backend module (`backends/NAME.py`) and one record here; nothing else asks which
backend a task has.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendProfile:
    name: str  # the backend module's name
    device_kind: str  # what bank questions are tagged with ("gpu", "cpu")
    devices: bool  # the worker needs the device files (and a device context)
    cuda_runner: bool  # its kernel runner (runner.c, beside the worker) is built with the CUDA runtime
    rounds: int  # timing rounds by default
    timing_budget_ms: float  # per scenario; slow kernels get fewer rounds
    start_limit_s: float  # until the worker's first message (interpreter, runtime, device context)
    min_step_limit_s: float  # the least a step may take before the next message
    # Candidates compiled ahead per evaluation slot while the device is busy. CUDA: a Hopper-seed variant takes
    # 6.5-9.3 s to build and a screened check 4-5 s (H200, 2026-12-01): with one queued per slot every other
    # check waited for its build. CPU: none (compiling beside a timed CPU kernel disturbs its timing).
    builds_ahead: int
    parallel_by_default: bool  # evaluations share the machine well enough to run several at once


PROFILES = {
    # CPU: the kernels share the cores with everything else, so one evaluation at a time and nothing built
    # beside a timed call.
    "cpu": BackendProfile("cpu", "cpu", devices=False, cuda_runner=False, rounds=7, timing_budget_ms=400.0,
                          start_limit_s=60.0, min_step_limit_s=10.0, builds_ahead=0, parallel_by_default=False),
    "cuda": BackendProfile("cuda", "gpu", devices=True, cuda_runner=True, rounds=30, timing_budget_ms=3000.0,
                           start_limit_s=120.0, min_step_limit_s=30.0, builds_ahead=2, parallel_by_default=True),
}


def profile_of(backend: str) -> BackendProfile:
    return PROFILES[backend]
