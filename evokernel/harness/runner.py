"""The trusted side of a kernel runner: the native program `runner.c` loads one kernel library in a process
of its own, and this module, in the worker that never loads candidate code, owns its buffers and its clock.
(A CUDA runner's tensors stay in the worker's device memory and its arena holds only the parameter structs:
see `backends/cuda.py`.)

Per call: while the runner is stopped (SIGSTOP) the worker copies the call's inputs, poisoned outputs and
guard bands into a fresh slot of the shared arena and writes the request; it reads its clock and continues
the runner (SIGCONT) on the worker's own CPU (the runner's main thread is pinned there while stopped and
unpins itself first thing: a CPU that sat idle wakes late and cold, by tens of microseconds and several
percent of a short kernel's time). The runner serves the request and stops itself; the worker waits
(blocked, taking no core from the kernel's threads) until the operating system reports the runner stopped,
every thread of it, and reads its clock again. So no thread of the candidate runs while its outputs are
read or its next inputs written, a kernel that "replies" early and works on is still running (and timed)
or else stopped with its work unfinished, and the time is the worker's own:
the interval, less the round trip of an empty request to a runner that loads no kernel (timed the same
way in the same rounds; see `protocol.net_ms`). A runner can make itself look slower, never faster. Whatever it writes into the arena (a
forged reply, return codes, inputs) is checked or ignored: the reply's sequence number must be the
request's, and the outputs are judged from the worker's copies.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from evokernel.errors import BadInput
from evokernel.harness.backends import Inputs, parameter_struct, poison
from evokernel.harness.languages import cuda_library_dirs
from evokernel.harness.protocol import MAX_BATCH, Rejected

BINARY_NAME = "evk-runner"
COMMAND_CALL, COMMAND_LOAD, COMMAND_OPEN, COMMAND_TOUCH, COMMAND_NULL, COMMAND_CLOSE = 0, 1, 2, 3, 4, 5
# runner.c's `struct mailbox`: field -> (byte offset, numpy dtype, count)
MAILBOX = {"request": (0, np.uint64, 1), "reply": (8, np.uint64, 1), "base": (16, np.uint64, 1),
           "command": (24, np.uint32, 1), "count": (28, np.uint32, 1), "status": (32, np.int32, 1),
           "rc": (36, np.int32, MAX_BATCH), "offsets": (1064, np.uint64, MAX_BATCH),
           "handle": (4008, np.uint8, 64), "opened": (4072, np.uint64, 1)}
PATH_FIELD, SYMBOL_FIELD, ERROR_FIELD = (3112, 512), (3624, 128), (3752, 256)
MAILBOX_BYTES = 4096
ALIGN = 4096  # every buffer of a call starts on its own page
SLOTS = 2  # requests alternate between this many sets of slots: each call's buffers are at new addresses


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def refuse_inspection() -> None:
    """Make this process non-dumpable: no other process of the same user (a runner) may attach to it or open
    its memory or descriptors under /proc."""
    PR_SET_DUMPABLE = 4
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _cuda_flags() -> list[str]:
    """Compile and link flags of the CUDA runner: the toolkit's headers and shared runtime (the one the
    kernels link), found from where `nvcc` is."""
    libraries = cuda_library_dirs()
    if not libraries:
        raise BadInput("no CUDA toolkit (nvcc) to build the CUDA kernel runner")
    include = Path(libraries[0]).parent / "include"
    return ["-DEVK_CUDA", "-I", str(include), *(f"-L{d}" for d in libraries),
            *(f"-Wl,-rpath,{d}" for d in libraries), "-lcudart"]


def build_runner(cache: Path, compiler: str | None = None, cuda: bool = False) -> Path:
    """The runner for this machine, built once from `runner.c` (cached by the source's hash, compiler and
    kind): with `cuda`, the one that runs CUDA kernels."""
    source = resources.files("evokernel.harness").joinpath("runner.c").read_bytes()
    compiler = compiler or os.environ.get("CC") or "cc"
    flags = _cuda_flags() if cuda else []
    digest = hashlib.sha256(source + compiler.encode() + " ".join(flags).encode()).hexdigest()[:16]
    binary = cache / "runner" / digest / BINARY_NAME
    if binary.is_file():
        return binary
    if shutil.which(compiler) is None:
        raise BadInput(f"no C compiler '{compiler}' to build the kernel runner (install one or set CC)")
    binary.parent.mkdir(parents=True, exist_ok=True)
    (binary.parent / "runner.c").write_bytes(source)
    partial = binary.with_suffix(f".tmp{os.getpid()}")
    proc = subprocess.run([compiler, "-O2", "-std=gnu11", "-o", str(partial), str(binary.parent / "runner.c"),
                           *flags, "-ldl"], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise BadInput(f"the kernel runner does not build with {compiler}: {first}")
    os.replace(partial, binary)
    return binary


class RunnerGone(Rejected):
    """The runner died (crashed, exited) or could not load its kernel."""


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        try:
            return f"crashed ({signal.Signals(os.WTERMSIG(status)).name})"
        except ValueError:
            return f"crashed (signal {os.WTERMSIG(status)})"
    return f"exited early (code {os.WEXITSTATUS(status)})"


class Runner:
    """One runner process and its arena; calls go through `call` (the worker's host buffers, copied in) or
    `call_structs` (parameter structs as they are: a CUDA runner's pointers into device memory it opened).
    The process starts at once and is waited for at its first request (a CUDA runner's start-up, 0.1-0.2 s,
    overlaps whatever the worker does meanwhile)."""

    def __init__(self, binary: Path, arena_bytes: int, cpu: int | None = None, cuda: bool = False) -> None:
        self.arena_bytes, self.cpu, self.cuda = MAILBOX_BYTES + arena_bytes, cpu, cuda
        fd = os.memfd_create("evk-arena", 0)  # inherited by the runner, nobody else's
        try:
            os.ftruncate(fd, self.arena_bytes)
            self.arena = mmap.mmap(fd, self.arena_bytes)
            self.pid = os.posix_spawn(str(binary), [BINARY_NAME, str(fd), str(self.arena_bytes)], dict(os.environ))
        finally:
            os.close(fd)
        self.fields = {name: np.frombuffer(self.arena, dtype, count, offset)
                       for name, (offset, dtype, count) in MAILBOX.items()}
        self.sequence, self.alive, self.started = 0, True, False
        self.refused = ""  # a CUDA runner's: the runtime's last error after a request whose calls failed
        self.base = 0
        self.next_slot = 0
        self.mapped_to = MAILBOX_BYTES  # the runner has touched the arena up to here (page faults are not timed)

    def _start(self) -> None:
        self._await_stop("as it started")
        self.base = int(self.fields["base"][0])  # written before the runner stopped itself: still trusted
        self.started = True

    # -- the process -----------------------------------------------------------------------------
    def _await_stop(self, context: str | None = None) -> None:
        _, status = os.waitpid(self.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            self.alive = False
            raise RunnerGone(_exit_text(status) + (f" ({context})" if context else ""))

    def _serve(self, command: int, count: int = 0, after: Callable[[], None] | None = None) -> float:
        """One request: the runner is continued and its stop awaited. Returns the seconds from continuing it to
        the stop being reported, or to the end of `after` (run once the runner has stopped: the worker's own
        read of what the request should have left behind). The reply's sequence number must then be the
        request's."""
        if not self.alive:
            raise RunnerGone("the kernel runner has ended")
        if not self.started:
            self._start()
        self.sequence += 1
        self.fields["command"][0], self.fields["count"][0] = command, count
        self.fields["request"][0] = self.sequence
        # continued on the worker's CPU (its own, or where it runs now), which is busy and warm: the worker only
        # waits from here on; the runner spreads again first thing
        os.sched_setaffinity(self.pid, {self.cpu if self.cpu is not None else _libc().sched_getcpu()})
        started = time.perf_counter()
        os.kill(self.pid, signal.SIGCONT)
        self._await_stop()
        if after is not None:
            after()
        seconds = time.perf_counter() - started
        if int(self.fields["reply"][0]) != self.sequence:
            raise Rejected("the kernel runner stopped without replying to its request (or replied out of order)")
        return seconds

    def ping(self, after: Callable[[], None] | None = None) -> float:
        """The seconds of an empty request (the round trip); a CUDA runner's does one small device operation
        and waits for it, as a call's request waits for its kernel."""
        return self._serve(COMMAND_NULL if self.cuda else COMMAND_CALL, 0, after)

    def load(self, library: Path, symbol: str) -> None:
        for (offset, size), text in ((PATH_FIELD, str(library)), (SYMBOL_FIELD, symbol)):
            data = text.encode()[:size - 1]
            self.arena[offset:offset + size] = data + bytes(size - len(data))
        self._serve(COMMAND_LOAD)
        if int(self.fields["status"][0]) != 0:
            raise RunnerGone(f"the kernel runner could not load {library.name}: {self._error()}")

    def _error(self) -> str:
        offset, size = ERROR_FIELD
        return bytes(self.arena[offset:offset + size]).split(b"\0")[0].decode(errors="replace")

    def open(self, handle: bytes) -> int:
        """Map the worker's device allocation named by a CUDA IPC handle; returns its address in the runner (only
        the runner's own kernel uses it: a wrong one only hurts that kernel)."""
        self.fields["handle"][:] = np.frombuffer(handle, np.uint8)
        self._serve(COMMAND_OPEN)
        if int(self.fields["status"][0]) != 0:
            raise RunnerGone(f"the kernel runner could not open the call's device memory: {self._error()}")
        return int(self.fields["opened"][0])

    def unmap(self, address: int) -> None:
        """Close a mapping `open` made (before its allocation's address can come back in a new allocation)."""
        self.fields["opened"][0] = address
        self._serve(COMMAND_CLOSE)

    def stop(self) -> None:
        """End the process (the arena stays mapped here until this object goes)."""
        if self.alive:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.alive = False

    # -- calls -----------------------------------------------------------------------------------
    def _place(self, requests: list[Inputs], guard_elements: int) -> list[dict[str, int]]:
        """Copy every call's parameter struct and guarded buffers into the next set of slots (a page each);
        returns each call's buffer offsets."""
        sizes = {name: -(-buffer.nbytes // ALIGN) * ALIGN for name, buffer in requests[0].guarded.items()}
        call_bytes = ALIGN + sum(sizes.values())
        set_bytes = call_bytes * len(requests)
        if set_bytes * SLOTS > self.arena_bytes - MAILBOX_BYTES:
            raise Rejected(f"a request needs {set_bytes * SLOTS} bytes, more than the kernel runner's arena holds")
        start = MAILBOX_BYTES + (self.next_slot % SLOTS) * set_bytes
        self.next_slot += 1
        if MAILBOX_BYTES + SLOTS * set_bytes > self.mapped_to:
            self.fields["offsets"][:2] = self.mapped_to, MAILBOX_BYTES + SLOTS * set_bytes
            self._serve(COMMAND_TOUCH)
            self.mapped_to = MAILBOX_BYTES + SLOTS * set_bytes
        placed = []
        for position, inputs in enumerate(requests):
            struct_at = start + position * call_bytes
            offsets, at = {}, struct_at + ALIGN
            for name, buffer in inputs.guarded.items():
                offsets[name] = at
                self._view(buffer, at)[...] = buffer
                at += sizes[name]
            struct = parameter_struct(inputs.arguments, lambda name: self.base + offsets[name]
                                      + inputs.guarded[name].itemsize * guard_elements)
            self.arena[struct_at:struct_at + ctypes.sizeof(struct)] = bytes(struct)
            self.fields["offsets"][position] = struct_at
            placed.append(offsets)
        return placed

    def _view(self, buffer: np.ndarray, offset: int) -> np.ndarray:
        return np.frombuffer(self.arena, buffer.dtype, buffer.size, offset)

    def call(self, requests: list[Inputs], guard_elements: int,
             before: Callable[[], None] | None = None) -> tuple[list[int], float]:
        """Call the loaded kernel once on each of `requests` (the worker's buffers: copied in, and back once
        the runner has stopped) in one request; returns the return codes and the request's seconds by the
        worker's clock. `before` runs once the buffers are in place, just before the clock starts (a cache
        flush: the copies leave them warm)."""
        if not 1 <= len(requests) <= MAX_BATCH:
            raise ValueError(f"a request holds 1 to {MAX_BATCH} calls")
        placed = self._place(requests, guard_elements)
        if before is not None:
            before()
        seconds = self._serve(COMMAND_CALL, len(requests))
        for inputs, offsets in zip(requests, placed):
            for name, buffer in inputs.guarded.items():
                kept = self._view(buffer, offsets[name])
                buffer[...] = kept
                kept.fill(poison(kept))  # a kernel that kept a pointer reads NaN (or -1) from now on
        return [int(rc) for rc in self.fields["rc"][:len(requests)]], seconds

    def call_structs(self, structs: list[ctypes.Structure], before: Callable[[], None] | None = None,
                     after: Callable[[], None] | None = None) -> tuple[list[int], float]:
        """Call the loaded kernel once on each parameter struct (written as they are into the next slot) in one
        request; returns the return codes and the request's seconds by the worker's clock, from continuing the
        runner to the end of `after`. A CUDA runner waits for its whole device context before it replies and
        says whether the device failed (a fault: it cannot be called again)."""
        if not 1 <= len(structs) <= MAX_BATCH:
            raise ValueError(f"a request holds 1 to {MAX_BATCH} calls")
        size = -(-max(ctypes.sizeof(struct) for struct in structs) // 64) * 64
        if size * len(structs) * SLOTS > self.arena_bytes - MAILBOX_BYTES:
            raise Rejected("a request's parameter structs do not fit the kernel runner's arena")
        start = MAILBOX_BYTES + (self.next_slot % SLOTS) * size * len(structs)
        self.next_slot += 1
        for position, struct in enumerate(structs):
            at = start + position * size
            self.arena[at:at + ctypes.sizeof(struct)] = bytes(struct)
            self.fields["offsets"][position] = at
        if before is not None:
            before()
        seconds = self._serve(COMMAND_CALL, len(structs), after)
        if self.cuda and int(self.fields["status"][0]) != 0:
            self.stop()
            raise RunnerGone(f"the kernel failed on the device: {self._error()}")
        codes = [int(rc) for rc in self.fields["rc"][:len(structs)]]
        self.refused = self._error() if self.cuda and any(codes) else ""
        return codes, seconds
