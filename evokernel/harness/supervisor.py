"""The worker process: started (ahead of time, for a search), given its request, supervised while it
reports (each message within its step's time limit, the whole process tree within its memory limit,
the whole run within its backstop) and ended with everything it started. The isolation it runs in is
`sandbox`'s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from evokernel.harness import jit_cache
from evokernel.harness.protocol import CheckRequest
from evokernel.harness.runner import BINARY_NAME as RUNNER_NAME
from evokernel.harness.sandbox import (SCRATCH, Isolation, bwrap_command, clean_environment, isolation,
                                       library_toolchains, limit_files, python_paths)
from evokernel.harness.slot import Slot
from evokernel.harness.task import BUILT_SPEED_REFERENCES

MEMORY_POLL_S = 0.05


def _tree_rss_bytes(root: int) -> int:
    """Resident memory of `root` and all its descendants (read from the parent's /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * resource.getpagesize()
        except (OSError, IndexError, ValueError):
            continue
    total, frontier, seen = 0, [root], set()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        pid = frontier.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        frontier.extend(children.get(pid, []))
    return total


@dataclass
class Message:
    """One line the worker sent on the harness channel, with the parent's clock at its arrival."""

    data: dict
    arrived: float


@dataclass
class WorkerOutcome:
    messages: list[Message]  # everything the worker reported, in order
    failure: str | None  # why the worker stopped early (time or memory limit, crash, corrupt channel)
    output: str  # the worker's stdout/stderr (trimmed; shown to people, never parsed)
    seconds: float  # wall time of the worker process
    end_seconds: float = 0.0  # of which after its last message: taken down (and the slot's next worker prepared)
    isolation: Isolation = field(default_factory=lambda: isolation())

    def last_step(self) -> str | None:
        steps = [m.data.get("text") for m in self.messages if m.data.get("type") == "step"]
        return steps[-1] if steps else None


class _Drain(threading.Thread):
    """Reads a pipe to its end so the child never blocks on it; keeps the tail."""

    def __init__(self, pipe) -> None:
        super().__init__(daemon=True)
        self.pipe, self.chunks = pipe, bytearray()

    def run(self) -> None:
        while chunk := self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536):
            self.chunks += chunk
            del self.chunks[:-8000]


class _Channel(threading.Thread):
    """Reads the worker's JSON lines as they come and stamps each with the parent's clock on arrival
    (a thread of its own, so the stamps are not delayed by the parent's other duties)."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.lines, self.closed = fd, queue.Queue(), False

    def run(self) -> None:
        buffer = b""
        while chunk := os.read(self.fd, 1 << 20):
            arrived = time.perf_counter()
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.lines.put((line, arrived))
        os.close(self.fd)  # at the end of the channel: every process in the sandbox is gone
        self.lines.put((None, time.perf_counter()))


@dataclass
class _Started:
    """A sandboxed worker process that has paid its start-up (interpreter, runtime import, the task
    loaded) and waits for a request; it has seen no candidate yet, and serves exactly one. Its device
    context is made when it is told to `prepare`, or else after its request."""

    proc: subprocess.Popen
    holder: tempfile.TemporaryDirectory  # scratch/ (writable inside) and lib/ (the kernels, read-only inside)
    library: Path
    inside_library: Path
    reader: _Channel
    drain: _Drain
    box: Isolation

    def place_runner(self, runner: Path) -> Path:
        """The kernel runner copied into the worker's library folder (once); returns its path inside."""
        placed = self.library / RUNNER_NAME
        if not placed.exists():
            shutil.copyfile(runner, placed)
            placed.chmod(0o555)
        return self.inside_library / RUNNER_NAME

    def prepare(self, warm: dict | None = None, then_exit: bool = False, runner: Path | None = None) -> None:
        """Make the device context now (call only when no check is timing on this worker's device), start the
        kernel runners ahead where `runner` is given, then call the library speed reference `warm` names on its
        scenarios until the request comes (see `worker_start.warm_speed_reference`); with `then_exit`, on every
        scenario, and exit without a request."""
        try:
            message = {"type": "prepare", "warm": warm, "then_exit": then_exit,
                       "runner": str(self.place_runner(runner)) if runner else None}
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # a dead worker is replaced when it is taken

    def discard(self) -> None:
        _kill(self.proc)
        self.proc.wait()
        self.holder.cleanup()




@lru_cache(maxsize=None)
def _sweep_orphans() -> None:
    """Once per process: remove the scratch directories of harness processes that were killed (kill -9
    leaves no chance to clean up); each directory is named after the process that made it."""
    for directory in Path(tempfile.gettempdir()).glob("evk-worker-*-*"):
        owner = directory.name.split("-")[2]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            shutil.rmtree(directory, ignore_errors=True)


def _start(backend: str, devices: bool, task_dir: Path) -> _Started:
    """A worker for tasks of `backend`, started and importing; it can read `task_dir` (the task's files)."""
    box = isolation()
    _sweep_orphans()
    holder = tempfile.TemporaryDirectory(prefix=f"evk-worker-{os.getpid()}-")
    scratch, library = Path(holder.name) / "scratch", Path(holder.name) / "lib"
    scratch.mkdir()
    library.mkdir()
    import evokernel

    env = clean_environment()
    env["PYTHONPATH"] = str(Path(evokernel.__file__).resolve().parent.parent)
    if devices:  # the driver's compiled code of earlier workers: a private copy (see `jit_cache`)
        jit_cache.copy_into(scratch / jit_cache.DIRECTORY)
        env[jit_cache.VARIABLE] = str((SCRATCH if box.enforced else scratch) / jit_cache.DIRECTORY)
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", "evokernel.harness.worker", backend, str(task_dir.resolve()), str(write_end)]
    if box.enforced:
        inside_library = Path("/evk/lib")
        package = Path(evokernel.__file__).resolve().parent
        readable = python_paths() + library_toolchains() + ([] if task_dir.resolve().is_relative_to(package)
                                                             else [task_dir.resolve()])
        command = bwrap_command(argv, scratch, readable, devices)
        command[-len(argv) - 1:-len(argv) - 1] = ["--ro-bind", str(library), str(inside_library)]
        env["HOME"] = str(SCRATCH)
    else:
        inside_library, command = library, argv
        env["HOME"] = str(scratch)
    proc = subprocess.Popen(command, cwd=scratch, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, pass_fds=(write_end,), start_new_session=True,
                            preexec_fn=limit_files)
    os.close(write_end)
    reader, drain = _Channel(read_end), _Drain(proc.stdout)
    reader.start()
    drain.start()
    return _Started(proc, holder, library, inside_library, reader, drain, box)


def warm_jit_cache(key: tuple[str, bool, Path], warm: dict, limit_s: float, slot: Slot) -> None:
    """Once per evaluation slot for each `key` and `warm`: a worker that never receives a candidate calls the library
    speed reference on every scenario, and the code its driver compiled becomes the master cache that later
    workers copy (`jit_cache`). Call it only when no check is timing on the device. A warmer that fails or
    takes longer than `limit_s` publishes nothing: checks are then as slow as without the cache, not wrong."""
    memo = json.dumps([str(part) for part in key] + [warm], sort_keys=True)
    if memo in slot.jit_warmed:
        return
    slot.jit_warmed.add(memo)
    warmer = _start(*key)
    try:
        warmer.prepare(warm, then_exit=True)
        warmer.proc.stdin.close()
        if warmer.proc.wait(timeout=limit_s) == 0:
            jit_cache.publish(Path(warmer.holder.name) / "scratch" / jit_cache.DIRECTORY)
    except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
        pass
    finally:
        warmer.discard()


def _warm_up(request: CheckRequest) -> dict | None:
    """What a worker waiting for a check like `request` calls ahead: its speed reference on its scenarios."""
    return ({"speed_reference": request.speed_reference, "scenarios": request.scenarios}
            if request.time else None)


def _start_ahead(key: tuple[str, bool, Path], warm: dict | None, slot: Slot, runner: Path | None) -> None:
    """The slot's worker for its next check started (unless one waits) and told to prepare: its device context,
    its runners, the speed reference warming up. Call it only when no check is timing on the device."""
    if key not in slot.warm:
        slot.warm[key] = _start(*key)
    slot.warm[key].prepare(warm, runner=runner)


def prepare_first_worker(request: CheckRequest, start_limit_s: float, devices: bool, task_dir: Path, slot: Slot,
                         runner: Path | None = None) -> None:
    """Before a slot's first check like `request` on a device: what `run_worker` with `keep_warm` would do then
    (the library's JIT cache warmed, the worker started and prepared), done now, while the first kernels are still
    being compiled elsewhere. Nothing to do when a worker already waits in the slot."""
    key = (request.backend, devices, Path(task_dir))
    if not devices or key in slot.warm:
        return
    warm = _warm_up(request)
    if warm and warm["speed_reference"] not in BUILT_SPEED_REFERENCES:
        warm_jit_cache(key, warm, start_limit_s, slot)
    _start_ahead(key, warm, slot, runner)


def run_worker(request: CheckRequest, kernels: dict[str, Path], timeout_s: float, memory_limit_bytes: int,
               start_limit_s: float, devices: bool, task_dir: Path, slot: Slot, keep_warm: bool = False,
               runner: Path | None = None) -> WorkerOutcome:
    """Run `python -m evokernel.harness.worker` on `request` in the sandbox; never raises for a bad kernel.

    The request goes in on stdin; the worker answers with JSON lines on a pipe. Built kernels are
    copied into a read-only directory (`kernels` maps a name to a built object; the worker finds them
    by name), with the kernel runner `runner` where the backend runs kernels in one; the task's directory
    `task_dir` is readable, read-only. Each message may set `limit_s`, the time until the next message must
    arrive; the first one must arrive within `start_limit_s`; `timeout_s` bounds the whole run.

    The worker comes from `slot` when one was started for it there. With `keep_warm`, the slot's worker for
    the next check starts now for a GPU task (its interpreter, runtime
    import and task load run on the host beside this check; for a CPU task, once this check has ended)
    and makes its device context once this check's worker has ended, so that no start-up touches the
    device while a call is timed; each worker still serves one candidate only.
    """
    key = (request.backend, devices, Path(task_dir))
    warm = _warm_up(request)
    if keep_warm and devices and warm and warm["speed_reference"] not in BUILT_SPEED_REFERENCES:
        warm_jit_cache(key, warm, start_limit_s, slot)  # a library's code, compiled once for the search
    worker = slot.warm.pop(key, None)
    if worker is None or worker.proc.poll() is not None:
        if worker is not None:
            worker.discard()
        worker = _start(*key)
    if keep_warm and devices:  # host work only; beside a CPU task's check it would share the timed cores
        slot.warm[key] = _start(*key)
    try:
        for name, path in kernels.items():
            shutil.copyfile(path, worker.library / f"{name}.so")
            (worker.library / f"{name}.so").chmod(0o555)
        if runner is not None:
            worker.place_runner(runner)
        request = dataclasses.replace(request, library=str(worker.inside_library), self_destruct_s=timeout_s + 10)
        started = time.perf_counter()
        try:
            worker.proc.stdin.write(request.to_json().encode() + b"\n")
            worker.proc.stdin.close()
        except BrokenPipeError:
            pass
        messages, failure = _collect(worker.proc, worker.reader, started, timeout_s, memory_limit_bytes,
                                     start_limit_s)
        reported = bool(messages) and messages[-1].data["type"] == "done"
        ended = time.perf_counter()
        _end(worker.proc, reported)
        if keep_warm:  # the next check in this slot most likely asks the same
            _start_ahead(key, warm, slot, runner)
        if not reported:  # its last words may explain the failure; a worker that reported everything is not
            worker.drain.join(timeout=2)  # waited for (its runners' device contexts take seconds to tear down)
        seconds = time.perf_counter() - started
        text = bytes(worker.drain.chunks).decode(errors="replace")[-4000:]
        if failure is None and not reported and worker.proc.returncode not in (0, None):
            failure = _exit_reason(worker.proc.returncode, worker.box.enforced)
        return WorkerOutcome(messages, failure, text, seconds, seconds - (ended - started), worker.box)
    finally:
        worker.discard()


def _collect(proc: subprocess.Popen, reader: _Channel, started: float, timeout_s: float, memory_limit: int,
             start_limit_s: float) -> tuple[list[Message], str | None]:
    """Read the worker's messages until it is done, breaks a limit, or corrupts the channel."""
    messages: list[Message] = []
    limit_s, deadline_kind = start_limit_s, "start-up"
    last = started
    next_memory_check = 0.0
    while True:
        now = time.perf_counter()
        if now - started > timeout_s:
            _kill(proc)
            return messages, f"timed out after {timeout_s:.0f} s (killed)"
        if now - last > limit_s:
            _kill(proc)
            return messages, f"exceeded its time limit of {limit_s:.0f} s ({deadline_kind}; killed)"
        if now >= next_memory_check:
            if _tree_rss_bytes(proc.pid) > memory_limit:
                _kill(proc)
                return messages, f"exceeded the memory limit of {memory_limit / 2**30:.1f} GiB (killed)"
            next_memory_check = now + MEMORY_POLL_S
        try:
            line, arrived = reader.lines.get(timeout=MEMORY_POLL_S)
        except queue.Empty:
            continue
        if line is None:
            return messages, None  # the worker closed the channel (exited)
        try:
            data = json.loads(line)
            if not isinstance(data, dict) or not isinstance(data.get("type"), str):
                raise ValueError
        except ValueError:
            _kill(proc)
            return messages, "corrupted the harness channel (a line that is not a worker message)"
        messages.append(Message(data, arrived))
        last = arrived
        if data["type"] == "done":
            return messages, None
        if "limit_s" in data:
            limit_s = min(float(data["limit_s"]), timeout_s)
            deadline_kind = f"scaled from the original's time, during {data.get('text', 'a step')}"


def _exit_reason(code: int, in_bwrap: bool) -> str:
    """bwrap passes a child's death by signal N on as exit code 128 + N."""
    number = -code if code < 0 else code - 128 if in_bwrap and 128 < code < 128 + 65 else None
    if number is not None:
        try:
            return f"crashed ({signal.Signals(number).name})"
        except ValueError:
            pass
    return f"worker exited with code {code}"


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _end(proc: subprocess.Popen, reported: bool) -> None:
    """Take down the worker and anything it left in its session (the PID namespace dies with it): at once
    when it has `reported` everything (the check need not wait for its interpreter's and device context's
    teardown), else after letting it exit."""
    if not reported:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    _kill(proc)
    proc.wait()
