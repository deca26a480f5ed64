"""CUDA backend: the worker's device buffers, each call's in an allocation of its own; every built kernel runs in
a runner process of its own (`runner.py`, built with CUDA) that maps the call's allocation through a CUDA IPC
handle, and is timed by the worker's clock; library baselines run in the worker, timed by CUDA events.

A runner's request (after the worker's L2 flush) lasts from continuing it to the end of the worker's own read
of sampled output elements: a runner that replies before its kernel has finished is still timed until the
worker sees outputs, and outputs still poisoned when it replied reject it. Its time is net of the same request
to a clean runner (CUDA initialised, no kernel), whose one small device operation pays the same switch of the
GPU from the worker's context to a runner's.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import random
import weakref
from pathlib import Path

import numpy as np
import torch

from evokernel.harness import values
from evokernel.harness.backends import CANARY, GUARD_ELEMENTS, Fault, Inputs, canary, parameter_struct, poison
from evokernel.harness.protocol import MAX_BATCH, Rejected
from evokernel.harness.runner import BINARY_NAME, Runner
from evokernel.harness.task import Tensor

FLUSH_BYTES = 256 << 20
# A device-side spin queued before the start event (as nvbench's blocking kernel does) so that the host
# has launched the timed call before the device reaches it: host-side call overhead (a Python SDPA
# dispatch, slower on a host that sat idle behind a long kernel) is then not timed. The spin doubles
# whenever the device got there first, and that sample is taken again; it halves after a run of samples
# queued in time, so that one slow launch (a collection, a library's plan) does not make every later call
# wait milliseconds of spin (the spin is outside the timed interval, not outside the check's time).
LAUNCH_SLACK_CYCLES = 100_000  # about 50 us
MAX_LAUNCH_SLACK_CYCLES = 1 << 25
SLACK_SHRINK_AFTER = 16  # samples queued in time in a row


class LaunchSlack:
    """The spin before a timed library call, in cycles: doubled when a call was queued late, halved (down to
    LAUNCH_SLACK_CYCLES) after SLACK_SHRINK_AFTER calls queued in time in a row."""

    def __init__(self) -> None:
        self.cycles, self.in_time = LAUNCH_SLACK_CYCLES, 0

    def taken(self, queued_in_time: bool) -> bool:
        """Whether the sample just timed stands (else it is timed again, with twice the spin)."""
        if not queued_in_time and self.cycles < MAX_LAUNCH_SLACK_CYCLES:
            self.cycles, self.in_time = self.cycles * 2, 0
            return False
        self.in_time += 1
        if self.in_time >= SLACK_SHRINK_AFTER:
            self.cycles, self.in_time = max(LAUNCH_SLACK_CYCLES, self.cycles // 2), 0
        return True


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
INDEX_DTYPES = {"int64": torch.int64, "int": torch.int32}  # of index inputs (`Indices.ctype`)
ALLOCATION_ALIGN = 256  # bytes, each tensor's start in its call's allocation
STRUCT_ARENA_BYTES = 64 << 10  # a CUDA runner's arena holds parameter structs only
SAMPLED_AFTER_REPLY = 1024  # output elements the worker reads before its clock stops
TARGET_REQUEST_MS = 2.0  # a timed request holds enough calls to last about this long


class DeviceMemory:
    """One call's buffers in an allocation of its own, outside torch's pool: a runner given its IPC handle maps
    this allocation and nothing else of the worker's. Freed when no tensor over it is left."""

    serials = itertools.count()

    def __init__(self, driver: ctypes.CDLL, nbytes: int) -> None:
        pointer = ctypes.c_uint64()
        status = driver.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(nbytes))
        if status != 0:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (cuMemAlloc of {nbytes} bytes: {status})")
        self.driver, self.pointer, self.nbytes = driver, pointer.value, nbytes
        self.serial = next(self.serials)
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.pointer, False),
                                         "version": 3, "strides": None}
        weakref.finalize(self, driver.cuMemFree_v2, ctypes.c_uint64(self.pointer))
        self.handle_bytes: bytes | None = None

    def handle(self) -> bytes:
        """Its CUDA IPC handle (64 bytes)."""
        if self.handle_bytes is None:
            handle = (ctypes.c_ubyte * 64)()
            status = self.driver.cuIpcGetMemHandle(handle, ctypes.c_uint64(self.pointer))
            if status != 0:
                raise RuntimeError(f"cuIpcGetMemHandle failed ({status})")
            self.handle_bytes = bytes(handle)
        return self.handle_bytes

    def tensors(self, sizes: list[tuple[int, torch.dtype]]) -> list[torch.Tensor]:
        """Flat tensors of these lengths and types, one after another (each aligned)."""
        whole = torch.as_tensor(self, device="cuda")  # keeps this object, and so the allocation, alive
        out, at = [], 0
        for length, dtype in sizes:
            out.append(whole[at:at + length * dtype.itemsize].view(dtype))
            at += _aligned(length * dtype.itemsize)
        return out

    @staticmethod
    def bytes_for(sizes: list[tuple[int, torch.dtype]]) -> int:
        return sum(_aligned(length * dtype.itemsize) for length, dtype in sizes)


def _aligned(nbytes: int) -> int:
    """`nbytes` rounded up to where the next tensor of an allocation may start."""
    return -(-nbytes // ALLOCATION_ALIGN) * ALLOCATION_ALIGN


class SampledRead:
    """The worker's read of random output elements after a runner has stopped (positions drawn before the
    request): the clock stops when it has completed, and elements still NaN mean the runner replied before its
    kernel had written them. It reads two of the arrays: the request's last (the last work queued) and one drawn
    at random, so that it costs the same whatever the request holds (the clean runner's request ends with the
    same read, and the difference is taken off)."""

    def __init__(self, arrays: list[torch.Tensor], positions: torch.Generator) -> None:
        drawn = random.SystemRandom().randrange(len(arrays))
        self.parts = []
        for array in (arrays[-1], arrays[drawn]):
            count = min(SAMPLED_AFTER_REPLY // 2, array.numel())
            index = torch.randint(array.numel(), (count,), device=array.device, generator=positions)
            host = torch.empty(count, dtype=array.dtype, pin_memory=True)
            self.parts.append((array.reshape(-1), index, host))

    def __call__(self) -> None:
        for flat, index, host in self.parts:
            host.copy_(flat.index_select(0, index), non_blocking=True)
        torch.cuda.current_stream().synchronize()

    def poisoned(self) -> int:
        return sum(int(torch.isnan(host.float()).sum()) for _, _, host in self.parts)


class RunnerKernel:
    """A built kernel loaded by a CUDA runner beside the worker: called on the worker's device buffers (the
    runner maps each call's allocation once), timed by the worker's clock. The runner starts at once and loads
    the kernel at its first call, so that runners' CUDA start-ups overlap (a waiting worker's runners have
    started before its request: `Backend.start_runners`)."""

    def __init__(self, path: Path, symbol: str, runner: Runner, positions: torch.Generator) -> None:
        self.path, self.symbol, self.positions = Path(path), symbol, positions
        self.runner = runner
        self.loaded = False
        self.mapped: dict[int, tuple[int, weakref.ref]] = {}  # DeviceMemory serial -> its address in the runner

    def _map(self, memory: DeviceMemory) -> int:
        """The allocation's address in the runner, mapped on first use; mappings of allocations the worker has
        freed are closed first (a new allocation may reuse the address, and the runtime refuses to map it twice)."""
        for serial, (address, alive) in list(self.mapped.items()):
            if alive() is None:
                self.runner.unmap(address)
                del self.mapped[serial]
        if memory.serial not in self.mapped:
            self.mapped[memory.serial] = (self.runner.open(memory.handle()), weakref.ref(memory))
        return self.mapped[memory.serial][0]

    def _struct(self, inputs: Inputs) -> ctypes.Structure:
        if not self.loaded:
            self.runner.load(self.path, self.symbol)
            self.loaded = True
        memory: DeviceMemory = inputs.memory
        base = self._map(memory)
        return parameter_struct(inputs.arguments, lambda name: base + inputs.arrays[name].data_ptr() - memory.pointer)

    def __call__(self, inputs: Inputs) -> int:
        # the worker's writes (inputs, poisoned outputs) are queued on its own stream: done before the runner runs
        return self.runner.call_structs([self._struct(inputs)], before=torch.cuda.synchronize)[0][0]

    def timed_ms(self, requests: list[Inputs], flush) -> float:
        """Each call's share of one request holding a call on each of `requests` (its round trip included)."""
        structs = [self._struct(inputs) for inputs in requests]
        read = SampledRead([inputs.arrays[name] for inputs in requests for name in inputs.output_names], self.positions)
        seconds = self.runner.call_structs(structs, before=flush, after=read)[1]
        if read.poisoned():
            raise Rejected(f"its runner replied to a timed call before the kernel had written its outputs "
                           f"({read.poisoned()} of the elements read right after the reply were still poisoned)")
        return seconds * 1e3 / len(requests)


class Backend:
    def __init__(self) -> None:
        # The host's work here is small (sampled values made float64, rows of a reference by BLAS): torch's
        # OpenMP threads spinning beside BLAS's made a d128/d256 sampled check 8-16 ms instead of 3-7 (H200 host).
        torch.set_num_threads(1)
        self.stream = torch.cuda.Stream()  # the harness's stream: a non-default, non-blocking stream
        torch.cuda.set_stream(self.stream)
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        self.driver = ctypes.CDLL("libcuda.so.1")
        self.slack = LaunchSlack()
        self.empty_runner: Runner | None = None  # loads no kernel: its requests' round trip is taken off
        self.spare_runners: list[Runner] = []  # started ahead, no kernel loaded yet
        self.positions = torch.Generator(device="cuda")  # of sampled reads: no runner can know its seed
        self.positions.manual_seed(random.SystemRandom().getrandbits(63))
        self.null_read = SampledRead([self.flush[:1 << 20]], self.positions)

    def device_name(self) -> str:
        """Model, the GPU's index on its host and the start of its UUID (results name the GPU that measured
        them), its architecture, SM count, L2 size and shared memory per SM (a prompt tells them to whoever
        writes the next kernel; a property this torch does not report is left out)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        properties = torch.cuda.get_device_properties(0)
        uuid = str(getattr(properties, "uuid", "") or "")[:8]
        l2_bytes = getattr(properties, "L2_cache_size", 0)
        smem_bytes = getattr(properties, "shared_memory_per_multiprocessor", 0)
        where = ", ".join(part for part in (f"GPU {visible or 0}", uuid and f"uuid {uuid}",
                                            f"sm_{properties.major}{properties.minor}",
                                            f"{properties.multi_processor_count} SMs",
                                            l2_bytes and f"{l2_bytes / 2**20:g} MiB L2",
                                            smem_bytes and f"{smem_bytes // 1024} KiB shared memory per SM") if part)
        return f"{torch.cuda.get_device_name()} ({where})"

    def start_runners(self, binary: Path, count: int = 3) -> None:
        """Start `count` runners now (the candidate's, the original's and the empty one): a worker waiting for
        its request pays their CUDA start-up, about 0.1-0.2 s each, before its check's clock runs."""
        self.spare_runners += [Runner(binary, STRUCT_ARENA_BYTES, cuda=True) for _ in range(count)]

    def _runner(self, binary: Path) -> Runner:
        return self.spare_runners.pop(0) if self.spare_runners else Runner(binary, STRUCT_ARENA_BYTES, cuda=True)

    def load(self, path, symbol: str, language) -> RunnerKernel:
        binary = Path(path).parent / BINARY_NAME
        if self.empty_runner is None:
            self.empty_runner = self._runner(binary)
        return RunnerKernel(path, symbol, self._runner(binary), self.positions)

    def _allocate(self, arguments: list, dtype: torch.dtype) -> tuple[DeviceMemory, dict, dict]:
        """Guarded buffers (and the views of their tensors) for one call, in an allocation of its own; an index
        input's of its integer type, every other of `dtype`."""
        tensors = [a for a in arguments if isinstance(a, Tensor)]
        sizes = [(t.size + 2 * GUARD_ELEMENTS, INDEX_DTYPES[t.indices.ctype] if t.indices else dtype) for t in tensors]
        memory = DeviceMemory(self.driver, DeviceMemory.bytes_for(sizes))
        guarded = dict(zip((t.name for t in tensors), memory.tensors(sizes)))
        arrays = {t.name: guarded[t.name][GUARD_ELEMENTS:GUARD_ELEMENTS + t.size].view(t.shape) for t in tensors}
        return memory, arrays, guarded

    def make_inputs(self, arguments: list, scenario, seed: int, distribution: str, dtype: str) -> Inputs:
        memory, arrays, guarded = self._allocate(arguments, DTYPES[dtype])
        position = 0
        for tensor in (a for a in arguments if isinstance(a, Tensor)):
            guarded[tensor.name].fill_(CANARY)
            view = arrays[tensor.name]
            if tensor.output:
                view.fill_(float("nan"))
            else:
                index = torch.arange(tensor.size, dtype=torch.int64, device="cuda")
                drawn = (values.draw_indices(index, values.tensor_seed(seed, position), tensor.indices.high)
                         if tensor.indices else values.draw(index, values.tensor_seed(seed, position), distribution,
                                                            lambda x: x.to(torch.float32)))
                view.copy_(drawn.view(tensor.shape))  # rounds to the dtype (nearest even), as the parent does
                position += 1
                del index, drawn
        return Inputs(scenario, arguments, arrays, guarded, memory=memory)

    def like(self, inputs: Inputs) -> Inputs:
        """New buffers for the same call (their values are set before use: rolled inputs, poisoned outputs)."""
        dtype = next(inputs.guarded[a.name].dtype for a in inputs.arguments if isinstance(a, Tensor) and not a.indices)
        memory, arrays, guarded = self._allocate(inputs.arguments, dtype)
        for name, buffer in inputs.guarded.items():
            guarded[name].copy_(buffer)
        return Inputs(inputs.scenario, inputs.arguments, arrays, guarded, memory=memory)

    def roll_inputs(self, inputs: Inputs, base: Inputs, offsets: tuple[int, ...]) -> None:
        """New input values for a timed call: `base` rolled, each input as its `roll_axis` says (outside the timed
        region)."""
        rolled = [a for a in inputs.arguments if isinstance(a, Tensor) and not a.output]
        for tensor, roll in zip(rolled, offsets):
            inputs.arrays[tensor.name].copy_(torch.roll(base.arrays[tensor.name], roll, dims=tensor.roll_axis))

    def gather(self, array: torch.Tensor, flat) -> np.ndarray:
        """Elements at flat positions, as float64; copied to the host in their own type (a sampled check reads a
        whole attention head: a quarter of the bytes of float64)."""
        index = torch.as_tensor(np.asarray(flat, dtype=np.int64), device=array.device)
        return array.reshape(-1)[index].cpu().double().numpy()

    def faults(self, calls: list[Inputs]) -> list[Fault]:
        """Each call's guard bands and outputs, as `Fault`s, read back from the device at once (a timed request's
        calls: one wait for the device instead of two a call). A handful of device operations a request, not a
        few per buffer (a request of four attention calls took 1.5 ms of launches): the guard bands of one element
        type are compared in one operation, and each output is summed in float32, since a sum is finite only if
        every element is (NaN and Inf survive addition); the non-finite elements are counted only in an output
        whose sum is not (a failing call's, or one whose sum overflowed)."""
        guarded = [(number, name, buffer) for number, inputs in enumerate(calls) for name, buffer in inputs.guarded.items()]
        by_type: dict[torch.dtype, list] = {}
        for entry in guarded:
            by_type.setdefault(entry[2].dtype, []).append(entry)
        changed = []
        for entries in by_type.values():
            bands = torch.cat([band for *_, b in entries for band in (b[:GUARD_ELEMENTS], b[-GUARD_ELEMENTS:])])
            changed.append((bands.view(len(entries), -1) != canary(entries[0][2])).any(dim=1).float())
        outputs = [(number, name, inputs.arrays[name]) for number, inputs in enumerate(calls)
                   for name in inputs.output_names]
        sums = [array.sum(dtype=torch.float32).reshape(1) for *_, array in outputs]
        read = torch.cat(changed + sums).tolist()
        broken = {(number, name) for (number, name, _), flag in
                  zip((e for entries in by_type.values() for e in entries), read) if flag}
        nonfinite = {(number, name): 0 if np.isfinite(total) else self.count_nonfinite(array)
                     for (number, name, array), total in zip(outputs, read[len(guarded):])}
        faults = []
        for number, inputs in enumerate(calls):
            first_broken = next((name for name in inputs.guarded if (number, name) in broken), None)
            faults.append(Fault(first_broken, {name: nonfinite[number, name] for name in inputs.output_names}))
        return faults

    def snapshot(self, inputs: Inputs) -> dict:
        return {name: array.clone() for name, array in inputs.inputs().items()}

    def unchanged(self, inputs: Inputs, snapshot: dict) -> bool:
        return all(torch.equal(inputs.arrays[name], kept) for name, kept in snapshot.items())

    def poison_outputs(self, inputs: Inputs) -> None:
        for name in inputs.output_names:
            inputs.arrays[name].fill_(float("nan"))  # unwritten elements stay NaN

    def run(self, fn, inputs: Inputs) -> tuple[int, dict[str, torch.Tensor]]:
        self.poison_outputs(inputs)
        rc = fn(inputs)
        self.stream.synchronize()  # only the harness stream: work elsewhere is not waited for
        torch.cuda.synchronize()  # surface asynchronous kernel faults here, inside this check
        # copies: later poisoning of the buffers does not reach them
        return rc, {name: inputs.arrays[name].to(torch.float32, copy=True) for name in inputs.output_names}

    def batch_size(self, call_ms: float) -> int:
        """Calls per timed request for a kernel of about `call_ms` (a request's round trip, about 0.2 ms and
        noisy, is measured in every round and taken off: a short kernel's request holds many calls)."""
        return max(1, min(MAX_BATCH, round(TARGET_REQUEST_MS / max(call_ms, 1e-3))))

    def _flushed(self) -> None:
        self.flush.zero_()  # evict the inputs from L2
        torch.cuda.synchronize()

    def overhead_ms(self) -> float | None:
        """The round trip of a clean runner's request in the conditions of a timed one: after the flush, with one
        small device operation, to the end of the same read of sampled elements."""
        if self.empty_runner is None:
            return None
        self._flushed()
        return self.empty_runner.ping(after=self.null_read) * 1e3

    def time_calls(self, fn, requests: list[Inputs]) -> float:
        """Each call's share of one request holding a call on each of `requests` (a runner's kernel, by this
        process's clock, round trip included; see `overhead_ms`), or a library baseline's mean event time."""
        if isinstance(fn, RunnerKernel):
            return fn.timed_ms(requests, self._flushed)
        return sum(self.time_call(fn, inputs) for inputs in requests) / len(requests)

    def time_call(self, fn, inputs: Inputs) -> float:
        while True:
            self.flush.zero_()  # evict the inputs from L2
            torch.cuda._sleep(self.slack.cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            fn(inputs)
            end.record(self.stream)
            queued_in_time = not start.query()  # the device was still spinning when the call was queued
            end.synchronize()
            if self.slack.taken(queued_in_time):
                return start.elapsed_time(end)

    # Comparisons stay on the device: a 16k-token output is 33M elements.
    def count_nonfinite(self, x: torch.Tensor) -> int:
        return int(x.numel() - torch.isfinite(x).sum().item())

    def max_abs_diff(self, a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b.float()).abs().max().item())

    def relative_error(self, out: torch.Tensor, ref: torch.Tensor) -> float:
        norm = torch.linalg.vector_norm(ref, dtype=torch.float64).item()
        return float(torch.linalg.vector_norm(out.float() - ref, dtype=torch.float64).item() / max(norm, 1e-30))

    def size(self, x: torch.Tensor) -> int:
        return x.numel()

    def release(self, inputs: Inputs) -> None:
        for buffer in inputs.guarded.values():
            buffer.fill_(poison(buffer))  # a kernel that reads freed memory later reads NaN (or -1)
        torch.cuda.synchronize()
