"""CPU backend: fp32 numpy buffers in the worker; every built kernel runs in a runner process of its own
(`runner.py`) and is timed by the worker's clock, with a cache flush before every call."""

from __future__ import annotations

import math
import os
import platform
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from evokernel.harness import values
from evokernel.harness.backends import CANARY, GUARD_ELEMENTS, Fault, Inputs, canary, poison
from evokernel.harness.protocol import MAX_BATCH
from evokernel.harness.runner import BINARY_NAME, Runner
from evokernel.harness.task import Tensor

FLUSH_BYTES = 32 << 20
DTYPES = {"float32": np.float32}
VECTOR_EXTENSIONS = ("avx512f", "avx2", "fma", "sve", "asimd")  # named in the device, as /proc/cpuinfo lists them
ARENA_BYTES = 512 << 20  # each runner's shared buffers (sparse: only what calls touch is memory; under the file-size limit)
TARGET_REQUEST_MS = 2.0  # a timed request holds enough calls to last about this long (the round trip is small)


def _intact(buffer: np.ndarray) -> bool:
    """Whether a buffer's guard bands still hold the canary."""
    held = canary(buffer)
    return bool(np.all(buffer[:GUARD_ELEMENTS] == held) and np.all(buffer[-GUARD_ELEMENTS:] == held))


class RunnerKernel:
    """A built kernel loaded by a runner process beside the worker (the runner is `evk-runner`, next to the
    library): called on the worker's buffers, timed by the worker's clock."""

    def __init__(self, path: Path, symbol: str, cpu: int) -> None:
        self.runner = Runner(Path(path).parent / BINARY_NAME, ARENA_BYTES, cpu)
        self.runner.load(Path(path), symbol)

    def __call__(self, inputs: Inputs) -> int:
        return self.runner.call([inputs], GUARD_ELEMENTS)[0][0]

    def timed_ms(self, requests: list[Inputs], flush: Callable[[], None]) -> float:
        """Each call's share of one request's time (its round trip included)."""
        return self.runner.call(requests, GUARD_ELEMENTS, before=flush)[1] * 1e3 / len(requests)


class Backend:
    def __init__(self) -> None:
        self.flush = np.zeros(FLUSH_BYTES // 4, dtype=np.float32)
        self.cpu = min(os.sched_getaffinity(0))  # this worker's, where every runner is continued
        os.sched_setaffinity(0, {self.cpu})
        self.runner_binary: Path | None = None
        self.empty_runner: Runner | None = None  # loads no kernel: its round trip is the requests' overhead

    def device_name(self) -> str:
        """Model, vector extensions and cores: results name the CPU that measured them, and a prompt tells
        whoever writes the next kernel what `-march=native` targets."""
        try:
            info = Path("/proc/cpuinfo").read_text()
        except OSError:  # not Linux
            info = ""
        model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
        flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", info, re.MULTILINE)
        vector = [name for name in VECTOR_EXTENSIONS if flags and name in flags[1].split()]
        details = ", ".join([platform.machine(), *vector, f"{os.cpu_count()} cores"])
        return f"{model[1].strip() if model else platform.processor() or platform.machine()} ({details})"

    def load(self, path, symbol: str, language) -> RunnerKernel:
        self.runner_binary = Path(path).parent / BINARY_NAME
        return RunnerKernel(path, symbol, self.cpu)

    def make_inputs(self, arguments: list, scenario, seed: int, distribution: str, dtype: str) -> Inputs:
        arrays, guarded = {}, {}
        position = 0
        for tensor in (a for a in arguments if isinstance(a, Tensor)):
            size = tensor.size
            buffer = np.full(size + 2 * GUARD_ELEMENTS, CANARY, dtype=values.numpy_type(tensor, DTYPES[dtype]))
            view = buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + size].reshape(tensor.shape)
            if tensor.output:
                view.fill(np.nan)
            else:
                index = np.arange(size, dtype=np.int64).reshape(tensor.shape)
                view[...] = values.numpy_input(tensor.indices, index, values.tensor_seed(seed, position), distribution)
                position += 1
            arrays[tensor.name], guarded[tensor.name] = view, buffer
        return Inputs(scenario, arguments, arrays, guarded)

    def like(self, inputs: Inputs) -> Inputs:
        """New buffers for the same call (their values are set before use: rolled inputs, poisoned outputs)."""
        guarded = {name: buffer.copy() for name, buffer in inputs.guarded.items()}
        arrays = {name: guarded[name][GUARD_ELEMENTS:GUARD_ELEMENTS + array.size].reshape(array.shape)
                  for name, array in inputs.arrays.items()}
        return Inputs(inputs.scenario, inputs.arguments, arrays, guarded)

    def roll_inputs(self, inputs: Inputs, base: Inputs, offsets: tuple[int, ...]) -> None:
        """New input values for a timed call: `base` rolled, each input as its `roll_axis` says (outside the timed
        region)."""
        rolled = [a for a in inputs.arguments if isinstance(a, Tensor) and not a.output]
        for tensor, roll in zip(rolled, offsets):
            inputs.arrays[tensor.name][...] = np.roll(base.arrays[tensor.name], roll, axis=tensor.roll_axis)

    def gather(self, array: np.ndarray, flat: np.ndarray) -> np.ndarray:
        return array.reshape(-1)[np.asarray(flat, dtype=np.int64)].astype(np.float64)

    def faults(self, calls: list[Inputs]) -> list[Fault]:
        """Each call's guard bands and outputs, as `Fault`s."""
        return [Fault(next((name for name, buffer in inputs.guarded.items() if not _intact(buffer)), None),
                      {name: self.count_nonfinite(inputs.arrays[name]) for name in inputs.output_names})
                for inputs in calls]

    def snapshot(self, inputs: Inputs) -> dict:
        return {name: array.copy() for name, array in inputs.inputs().items()}

    def unchanged(self, inputs: Inputs, snapshot: dict) -> bool:
        return all(np.array_equal(inputs.arrays[name], kept) for name, kept in snapshot.items())

    def poison_outputs(self, inputs: Inputs) -> None:
        for name in inputs.output_names:
            inputs.arrays[name].fill(np.nan)  # unwritten elements stay NaN

    def run(self, fn, inputs: Inputs) -> tuple[int, dict[str, np.ndarray]]:
        self.poison_outputs(inputs)
        rc = fn(inputs)
        return rc, {name: inputs.arrays[name].astype(np.float64) for name in inputs.output_names}

    def flush_caches(self) -> None:
        self.flush.fill(self.flush[0] + 1.0)  # evicts the inputs (a cache level the cores share, at least)

    def batch_size(self, call_ms: float) -> int:
        """Calls per timed request for a kernel of about `call_ms`."""
        return max(1, min(MAX_BATCH, round(TARGET_REQUEST_MS / max(call_ms, 1e-3))))

    def time_calls(self, fn, requests: list[Inputs]) -> float:
        """Each call's share of the time of one request holding a call on each of `requests`: a runner's
        kernel in one request, timed by this process's clock (round trip included; see `overhead_ms`)."""
        if isinstance(fn, RunnerKernel):
            return fn.timed_ms(requests, self.flush_caches)
        total = 0.0
        for inputs in requests:  # a library's function, in this process
            self.flush_caches()
            start = time.perf_counter()
            fn(inputs)
            total += time.perf_counter() - start
        return total * 1e3 / len(requests)

    def overhead_ms(self) -> float | None:
        """The round trip of an empty request, in the conditions of a timed one (after a cache flush)."""
        if self.runner_binary is None:
            return None
        if self.empty_runner is None:
            self.empty_runner = Runner(self.runner_binary, 0, self.cpu)
        self.flush_caches()
        return self.empty_runner.ping() * 1e3

    def count_nonfinite(self, x: np.ndarray) -> int:
        return int(x.size - np.count_nonzero(np.isfinite(x)))

    def max_abs_diff(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - b)))

    def relative_error(self, out: np.ndarray, ref: np.ndarray) -> float:
        ref = np.asarray(ref, dtype=np.float64)
        return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))

    def size(self, x: np.ndarray) -> int:
        return math.prod(x.shape)

    def release(self, inputs: Inputs) -> None:
        for buffer in inputs.guarded.values():
            buffer.fill(poison(buffer))  # a kernel that kept a pointer reads NaN (or -1) from now on
