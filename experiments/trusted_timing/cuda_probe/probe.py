#!/usr/bin/env python3
"""Trusted side of the CUDA runner probe (see FINDINGS.md): a torch process that owns the device buffers
(cudaMalloc + CUDA IPC), the clock and the checks, and drives `runner_cuda` processes by runner.c's protocol
(mailbox in a shared memfd page, SIGCONT, waitpid(WUNTRACED) on the runner's raise(SIGSTOP)).

    python3 probe.py --runner BUILD/runner_cuda --kernel BUILD/kernel.so --out DIR [--rounds 50] [--only ...]

Parts: setup (buffers, seed in-process, cuDNN), seccomp (Q2: each rule of the pre-load stage alone under CUDA's
initialisation, then whole runs under the filters in several orders), timing (Q1 open cost, Q5 start-up, Q3 timing
fidelity; with the filters in the order that worked, if one did), early (Q4 early reply). Everything goes to DIR/probe.json, a readable summary to stdout.
Measured figures only; nothing here changes clocks or device settings.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import mmap
import os
import random
import signal
import statistics
import sys
import time
import traceback
from dataclasses import dataclass

# --- runner_cuda.cu's mailbox ---------------------------------------------------------------------
MAX_ARENAS, MAX_STEPS, MAX_DENIED, DENIED_PATH = 16, 16, 64, 48
C_PING, C_INIT, C_OPEN, C_LOAD, C_CALL, C_CAPTURE, C_FILTER, C_POSTTEST = range(8)
F_SYNC, F_GRAPH, F_NULLK, F_SPIN = 1, 2, 4, 8
SPIN_CYCLES = 600_000  # the spin variant's device spin before each call (about 0.3 ms at 1980 MHz: longer than
# SDPA's host-side time, about 0.17 ms in the first run)
G_FILES, G_MMAPX, G_MPROTX, F_LOADED, F_TRAP, F_LOG = 1, 2, 4, 0x100, 0x200, 0x400
G_ALL = G_FILES | G_MMAPX | G_MPROTX
MAILBOX_BYTES = 8192
POSTTEST_STEPS = ["warm instance again", "new instance (other head dim)", "null kernel", "graph capture+replay",
                  "new stream", "cudaMalloc+memset+free", "event record+sync", "open another IPC handle",
                  "cudaDeviceSynchronize"]
i32, u32, u64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64


class CallDesc(ctypes.Structure):
    _fields_ = [(n, i32) for n in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal")] + \
               [("scale", ctypes.c_float)] + [(n, u64) for n in ("off_q", "off_k", "off_v", "off_o")]


class Mailbox(ctypes.Structure):
    _fields_ = [("request", u64), ("reply", u64), ("command", u32), ("flags", u32), ("arena", i32),
                ("arena2", i32), ("extra", i32), ("status", i32), ("struct_size", i32), ("pad0", i32),
                ("rc", i32 * MAX_STEPS), ("err", i32 * MAX_STEPS), ("t_us", ctypes.c_double * MAX_STEPS),
                ("denied_count", u32), ("denied_nr", u32 * MAX_DENIED), ("denied_total", u32),
                ("denied_arg", u64 * MAX_DENIED), ("denied_path", (ctypes.c_char * DENIED_PATH) * MAX_DENIED),
                ("calls", CallDesc * MAX_ARENAS), ("handles", (ctypes.c_ubyte * 64) * MAX_ARENAS),
                ("path", ctypes.c_char * 512), ("symbol", ctypes.c_char * 128), ("error", ctypes.c_char * 256),
                ("only_rule", i32), ("skip", ctypes.c_ubyte * 128)]


# runner_cuda.cu's rule ids: runner.c's denied[] list, then the rules after it
RULE_NAMES = ["ptrace", "process_vm_readv", "process_vm_writev", "kill", "tkill", "execve", "execveat", "socket",
              "socketpair", "connect", "bind", "listen", "accept", "accept4", "unshare", "setns", "mount", "umount2",
              "pivot_root", "chroot", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
              "io_uring_register", "kexec_load", "init_module", "finit_module", "delete_module", "add_key", "keyctl",
              "request_key", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "personality",
              "fork", "vfork", "clone3 (ENOSYS)", "clone without CLONE_THREAD", "tgkill to another process",
              "prctl PR_SET_PDEATHSIG", "prctl PR_SET_DUMPABLE", "mmap W+X", "mprotect W+X", "pkey_mprotect W+X",
              "x32 ABI"]


class Params(ctypes.Structure):  # evk_attention.h
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p)] + \
               [(n, ctypes.c_int) for n in ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim",
                                            "causal")] + [("softmax_scale", ctypes.c_float)]


SYSCALL_NAMES = {0: "read", 1: "write", 2: "open", 3: "close", 9: "mmap", 10: "mprotect", 41: "socket",
                 42: "connect", 53: "socketpair", 56: "clone", 57: "fork", 58: "vfork", 59: "execve", 62: "kill",
                 85: "creat", 101: "ptrace", 157: "prctl", 200: "tkill", 234: "tgkill", 257: "openat",
                 272: "unshare", 298: "perf_event_open", 310: "process_vm_readv", 311: "process_vm_writev",
                 319: "memfd_create", 321: "bpf", 323: "userfaultfd", 329: "pkey_mprotect", 425: "io_uring_setup",
                 434: "pidfd_open", 435: "clone3", 437: "openat2", 438: "pidfd_getfd", 304: "open_by_handle_at"}


class RunnerGone(Exception):
    pass


def _on_alarm(signum, frame):
    raise TimeoutError("the runner did not stop in time")


signal.signal(signal.SIGALRM, _on_alarm)


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exited with code {os.WEXITSTATUS(status)}"


class Runner:
    """One runner_cuda process and its mailbox (a memfd page it inherits)."""

    default_timeout = 30.0  # seconds a request may take before the runner is killed

    def __init__(self, binary: str, prefilter: str = "none", cpu: int | None = None, env: dict | None = None,
                 timeout: float = 60.0, only_rule: int = -1, skip: tuple = ()) -> None:
        fd = os.memfd_create("probe-mailbox", 0)  # inheritable: the runner maps it
        try:
            os.ftruncate(fd, MAILBOX_BYTES)
            self.mm = mmap.mmap(fd, MAILBOX_BYTES)
            box = Mailbox.from_buffer(self.mm)
            box.only_rule = only_rule  # read by every filter the runner builds, the one at its start too
            for rule in skip:
                box.skip[rule] = 1
            del box
            started = time.perf_counter()
            self.pid = os.posix_spawn(binary, ["runner_cuda", str(fd), str(MAILBOX_BYTES), prefilter],
                                      env if env is not None else dict(os.environ))
        finally:
            os.close(fd)
        self.box = Mailbox.from_buffer(self.mm)
        self.cpu, self.seq, self.alive = cpu, 0, True
        self._await(timeout)
        self.spawn_s = time.perf_counter() - started
        if self.box.struct_size != ctypes.sizeof(Mailbox):
            self.close()
            raise RunnerGone(f"mailbox layout differs: runner {self.box.struct_size}, probe {ctypes.sizeof(Mailbox)}")
        self.prefilter_status = int(self.box.status)

    def _await(self, timeout: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            _, status = os.waitpid(self.pid, os.WUNTRACED)
        except TimeoutError:
            self.close()
            raise RunnerGone(f"no stop within {timeout} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not os.WIFSTOPPED(status):
            self.alive = False
            raise RunnerGone(_exit_text(status))

    def serve(self, command: int, flags: int = 0, arena: int = 0, arena2: int = 0, extra: int = 0,
              timeout: float | None = None) -> float:
        """One request; the seconds from SIGCONT to the stop being reported (the worker's clock)."""
        timeout = timeout or self.default_timeout
        if not self.alive:
            raise RunnerGone("runner already gone")
        b = self.box
        ctypes.memset(ctypes.addressof(b) + Mailbox.rc.offset, 0, 2 * 4 * MAX_STEPS)  # rc and err
        b.command, b.flags, b.arena, b.arena2, b.extra = command, flags, arena, arena2, extra
        self.seq += 1
        b.request = self.seq
        if self.cpu is not None:
            os.sched_setaffinity(self.pid, {self.cpu})  # continued on the worker's CPU (runner.py does this)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            started = time.perf_counter()
            os.kill(self.pid, signal.SIGCONT)
            _, status = os.waitpid(self.pid, os.WUNTRACED)
            seconds = time.perf_counter() - started
        except TimeoutError:
            self.close()
            raise RunnerGone(f"request {command} got no stop within {timeout} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not os.WIFSTOPPED(status):
            self.alive = False
            raise RunnerGone(_exit_text(status) + f" during command {command}")
        if int(b.reply) != self.seq:
            raise RunnerGone("stopped without replying")
        return seconds

    def errs(self, n: int) -> list[int]:
        return [int(x) for x in self.box.err[:n]]

    def rcs(self, n: int) -> list[int]:
        return [int(x) for x in self.box.rc[:n]]

    def times_us(self, n: int) -> list[float]:
        return [round(float(x), 1) for x in self.box.t_us[:n]]

    def denied(self) -> list[dict]:
        b, out = self.box, []
        for i in range(min(int(b.denied_count), MAX_DENIED)):
            nr = int(b.denied_nr[i])
            out.append({"nr": nr, "name": SYSCALL_NAMES.get(nr, str(nr)), "arg": hex(int(b.denied_arg[i])),
                        "path": bytes(b.denied_path[i]).split(b"\0")[0].decode(errors="replace")})
        return out

    def close(self) -> None:
        if self.alive:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.alive = False


# --- scenarios (the `fa3` set of evokernel/builtin_tasks/attention_fwd/task.py) -----------------------------
@dataclass(frozen=True)
class Scenario:
    batch: int
    heads: int
    seqlen: int
    head_dim: int
    causal: bool

    @property
    def name(self) -> str:
        return f"d{self.head_dim}-b{self.batch}-h{self.heads}-s{self.seqlen}" + ("-causal" if self.causal else "")

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def flops(self) -> float:
        pairs = self.seqlen * (self.seqlen + 1) // 2 if self.causal else self.seqlen ** 2
        return 4.0 * self.batch * self.heads * self.head_dim * pairs


SCENARIOS = [Scenario(16, 32, 1024, 64, False), Scenario(16, 16, 1024, 128, True), Scenario(8, 16, 2048, 128, False),
             Scenario(4, 8, 4096, 256, True), Scenario(1, 16, 16384, 128, False), Scenario(1, 16, 16384, 128, True)]
WARM, NEW_INSTANCE = 1, 0  # seccomp test: warm-up on d128 (index 1), then a d64 call (index 0)
LONGEST = 4
FLUSH_BYTES = 256 << 20
LAUNCH_SLACK_CYCLES, MAX_LAUNCH_SLACK_CYCLES = 100_000, 1 << 25
ALIGN = 2 << 20


def med(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def find_cudart():
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "libcudart.so" in path:
                return ctypes.CDLL(path), path
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name), name
        except OSError:
            pass
    raise OSError("no libcudart")


def kernel_log() -> list[str]:
    """The kernel's log (dmesg; root on the device machine), for SECCOMP_RET_LOG records."""
    try:
        import subprocess
        return subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout.splitlines()
    except Exception as e:  # noqa: BLE001
        return [f"dmesg failed: {e}"]


class Probe:
    def __init__(self, args) -> None:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.F, self.SDPBackend, self.sdpa_kernel = torch, F, SDPBackend, sdpa_kernel
        self.args = args
        self.results: dict = {"errors": []}
        torch.cuda.init()
        self.cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {self.cpu})  # as the CPU backend's worker does; runners are continued here
        self.stream = torch.cuda.Stream()
        torch.cuda.set_stream(self.stream)
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        self.tiny = torch.zeros(1, dtype=torch.float32, device="cuda")
        self.slack = LAUNCH_SLACK_CYCLES
        self.cudart, cudart_path = find_cudart()
        p = torch.cuda.get_device_properties(0)
        self.results["device"] = {"name": torch.cuda.get_device_name(), "sms": p.multi_processor_count,
                                  "l2_mib": getattr(p, "L2_cache_size", 0) / 2 ** 20, "torch": torch.__version__,
                                  "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                                  "cudart": cudart_path, "worker_cpu": self.cpu,
                                  "cpus": os.cpu_count()}
        self.arenas: list[dict] = []

    # -- buffers -------------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> tuple[int, bytes]:
        ptr = ctypes.c_void_p()
        e = self.cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        if e != 0:
            raise RuntimeError(f"cudaMalloc error {e}")
        handle = (ctypes.c_ubyte * 64)()
        e = self.cudart.cudaIpcGetMemHandle(ctypes.byref(handle), ptr)
        if e != 0:
            raise RuntimeError(f"cudaIpcGetMemHandle error {e}")
        return int(ptr.value), bytes(handle)

    def wrap(self, ptr: int, nbytes: int):
        torch = self.torch

        class Interface:
            __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2,
                                        "strides": None}

        return torch.as_tensor(Interface(), device="cuda")

    def setup(self) -> None:
        torch = self.torch
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1234)
        for s in SCENARIOS:
            n = s.batch * s.seqlen * s.heads * s.head_dim
            nbytes = 2 * n
            slot = -(-nbytes // ALIGN) * ALIGN
            ptr, handle = self.malloc(4 * slot)
            raw = self.wrap(ptr, 4 * slot)
            shape = (s.batch, s.seqlen, s.heads, s.head_dim)
            t = {name: raw[i * slot:i * slot + nbytes].view(torch.bfloat16).view(shape)
                 for i, name in enumerate("qkvo")}
            for name in "qkv":
                t[name].copy_(torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32))
            t["o"].fill_(float("nan"))
            prep = tuple(t[name].transpose(1, 2).contiguous() for name in "qkv")
            params = Params(t["q"].data_ptr(), t["k"].data_ptr(), t["v"].data_ptr(), t["o"].data_ptr(), s.batch,
                            s.heads, s.heads, s.seqlen, s.seqlen, s.head_dim, int(s.causal), s.scale)
            desc = CallDesc(s.batch, s.heads, s.heads, s.seqlen, s.seqlen, s.head_dim, int(s.causal), s.scale,
                            0, slot, 2 * slot, 3 * slot)
            self.arenas.append({"s": s, "ptr": ptr, "handle": handle, "raw": raw, "t": t, "prep": prep,
                                "params": params, "desc": desc})
        # one more small arena: opened only after a seccomp filter (the posttest's step 7)
        ptr, handle = self.malloc(1 << 20)
        self.extra = {"ptr": ptr, "handle": handle, "desc": CallDesc()}
        torch.cuda.synchronize()
        for a in self.arenas:
            a["ref"] = self.cudnn(a)().transpose(1, 2).float()  # [b, s, h, d]
        torch.cuda.synchronize()

    def fill_box(self, r: Runner) -> None:
        for i, a in enumerate(self.arenas + [self.extra]):
            r.box.calls[i] = a["desc"]
            ctypes.memmove(ctypes.addressof(r.box.handles[i]), a["handle"], 64)

    # -- callables -------------------------------------------------------------------------------------
    def load_seed(self) -> None:
        lib = ctypes.CDLL(self.args.kernel)
        self.entry = lib.evk_attention_fwd
        self.entry.argtypes, self.entry.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int

    def seed(self, a):
        entry, params, torch = self.entry, a["params"], self.torch

        def call():
            rc = entry(ctypes.byref(params), torch.cuda.current_stream().cuda_stream)
            if rc != 0:
                raise RuntimeError(f"seed returned {rc}")
        return call

    def cudnn(self, a):
        F, s, prep = self.F, a["s"], a["prep"]
        backends, sdpa_kernel = [self.SDPBackend.CUDNN_ATTENTION], self.sdpa_kernel

        def call():
            with sdpa_kernel(backends):
                return F.scaled_dot_product_attention(*prep, is_causal=s.causal, scale=s.scale, enable_gqa=False)
        return call

    def graph_of(self, fn):
        torch = self.torch
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(self.stream)
        with torch.cuda.stream(side):
            fn()  # warm-up on the side stream, as torch's docs advise
        self.stream.wait_stream(side)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        return g.replay

    def null_kernel(self):
        self.tiny.fill_(1.0)

    # -- clocks ----------------------------------------------------------------------------------------
    def events_ms(self, fn) -> float:
        """backends/cuda.py's time_call: L2 flush, a device spin before the start event, events."""
        torch = self.torch
        while True:
            self.flush.zero_()
            torch.cuda._sleep(self.slack)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            fn()
            end.record(self.stream)
            queued_in_time = not start.query()
            end.synchronize()
            if queued_in_time or self.slack >= MAX_LAUNCH_SLACK_CYCLES:
                return start.elapsed_time(end)
            self.slack *= 2

    def flush_sync(self) -> None:
        self.flush.zero_()
        self.torch.cuda.synchronize()

    def wall_ms(self, fn) -> float:
        """The worker's own wall clock: launch + stream synchronize, after a flush the device has finished."""
        self.flush_sync()
        t0 = time.perf_counter()
        fn()
        self.stream.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def runner_ms(self, r: Runner, command: int, flags: int, arena: int = 0) -> float:
        self.flush_sync()
        return r.serve(command, flags, arena, extra=SPIN_CYCLES if flags & F_SPIN else 0) * 1e3

    def runner_pre_ms(self, r: Runner, command: int, flags: int, arena: int = 0) -> float:
        """As runner_ms, with an untimed null-kernel request to the same runner between the flush and the timed
        request: the device has switched to the runner's context before the clock starts."""
        self.flush_sync()
        r.serve(C_PING, F_NULLK | F_SYNC)
        return r.serve(command, flags, arena, extra=SPIN_CYCLES if flags & F_SPIN else 0) * 1e3

    def spun(self, fn):
        """fn behind a device spin of SPIN_CYCLES: the wall clock's version of the events' launch slack."""
        torch = self.torch

        def call():
            torch.cuda._sleep(SPIN_CYCLES)
            fn()
        return call

    def check(self, a) -> dict:
        o, ref = a["t"]["o"], a["ref"]
        nan = int(o.numel() - self.torch.isfinite(o).sum().item())
        err = float((o.float() - ref).abs().max().item())
        return {"nonfinite": nan, "max_abs_err_vs_cudnn": err}

    def poison(self, a) -> None:
        a["t"]["o"].fill_(float("nan"))
        self.torch.cuda.synchronize()

    # -- runners -----------------------------------------------------------------------------------------
    def start_runner(self, prefilter="none", env=None, load=True, arenas=True, record=None, only_rule=-1,
                     skip=(), pre_after_init=None) -> Runner:
        """A runner that has initialised CUDA, opened the arenas and loaded the seed (each optional); the costs
        go to `record`. A runner that fails on the way is closed (its refused calls, if logged, recorded).
        pre_after_init: FILTER flags of a pre-load stage installed once CUDA is initialised (None: none)."""
        r = Runner(self.args.runner, prefilter, self.cpu, env, only_rule=only_rule, skip=skip)
        rec = record if record is not None else {}
        try:
            self._bring_up(r, rec, load, arenas, pre_after_init)
        except BaseException:
            rec["denied"] = r.denied()
            rec["denied_distinct"], rec["denied_total"] = int(r.box.denied_count), int(r.box.denied_total)
            r.close()
            raise
        return r

    def _bring_up(self, r: Runner, rec: dict, load: bool, arenas: bool, pre_after_init=None) -> None:
        rec.update({"spawn_to_first_stop_ms": r.spawn_s * 1e3, "prefilter_status": r.prefilter_status})
        rec["init_ms"] = r.serve(C_INIT, timeout=2 * Runner.default_timeout) * 1e3
        rec["init_errs"], rec["init_runner_us"], rec["device_flags"] = r.errs(3), r.times_us(3), r.rcs(1)[0]
        if any(rec["init_errs"]):
            raise RunnerGone(f"CUDA init failed in the runner: {rec['init_errs']}")
        if pre_after_init is not None:
            r.serve(C_FILTER, pre_after_init)
            rec["pre_after_init_status"] = int(r.box.status)
            if r.box.status != 0:
                raise RunnerGone(f"pre-load stage after init not installed: {r.box.status}")
        if arenas:
            self.fill_box(r)
            rec["open_ms"] = r.serve(C_OPEN, arena=0, arena2=len(self.arenas)) * 1e3
            rec["open_errs"], rec["open_runner_us"] = r.errs(len(self.arenas)), r.times_us(len(self.arenas))
            if any(rec["open_errs"]):
                raise RunnerGone(f"cudaIpcOpenMemHandle failed: {rec['open_errs']}")
        if load:
            r.box.path = self.args.kernel.encode()
            r.box.symbol = b"evk_attention_fwd"
            rec["load_ms"] = r.serve(C_LOAD) * 1e3
            rec["dlopen_runner_us"] = r.times_us(1)[0]
            if r.box.status != 0:
                raise RunnerGone("load failed: " + r.box.error.decode(errors="replace"))

    # -- Q2 ------------------------------------------------------------------------------------------------
    def seccomp_variant(self, name: str, prefilter: str, when: str, groups: int, mode: str = "errno",
                        env: dict | None = None, worker_nondumpable: bool = False, skip: tuple = (),
                        pre_after_init: bool = False) -> dict:
        """One runner through start-up, a warm-up call and the post-test, with filters where the variant says.
        prefilter: the pre-load stage at the runner's start (none|errno|trap|log). when: the post-load stage
        'never', 'after_load' (runner.c's order: before any call) or 'after_warmup'. mode: errno|trap|log for
        stages installed by request. pre_after_init: the pre-load stage once CUDA is initialised instead.
        worker_nondumpable: the worker first makes itself non-dumpable, as runner.py's refuse_inspection does."""
        rec: dict = {"variant": name, "prefilter": prefilter, "post_filter_when": when, "groups": groups,
                     "mode": mode, "worker_nondumpable": worker_nondumpable,
                     "skip": [RULE_NAMES[i] for i in skip], "pre_after_init": pre_after_init}
        mode_flag = {"errno": 0, "trap": F_TRAP, "log": F_LOG}[mode]
        flags = F_LOADED | groups | mode_flag
        r = None
        libc = ctypes.CDLL(None)
        if worker_nondumpable:
            libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        kmsg_before = kernel_log() if mode == "log" or prefilter == "log" else None
        try:
            r = self.start_runner(prefilter, env=env, record=rec, skip=skip,
                                  pre_after_init=mode_flag if pre_after_init else None)
            if when == "after_load":
                r.serve(C_FILTER, flags)
                rec["filter_status"] = int(r.box.status)
            warm = self.arenas[WARM]
            self.poison(warm)
            r.serve(C_CALL, F_SYNC, WARM)
            rec["warm_call"] = {"rc": r.rcs(1)[0], "sync_err": r.errs(1)[0], **self.check(warm)}
            if when == "after_warmup":
                r.serve(C_FILTER, flags)
                rec["filter_status"] = int(r.box.status)
            self.poison(warm)
            self.poison(self.arenas[NEW_INSTANCE])
            r.serve(C_POSTTEST, arena=WARM, arena2=NEW_INSTANCE, extra=len(self.arenas))
            n = len(POSTTEST_STEPS)
            rec["posttest"] = [{"step": POSTTEST_STEPS[i], "rc": rc, "err": e, "runner_us": t}
                               for i, (rc, e, t) in enumerate(zip(r.rcs(n), r.errs(n), r.times_us(n)))]
            rec["out_warm"] = self.check(warm)  # the graph replay (step 3) wrote it again
            rec["out_new_instance"] = self.check(self.arenas[NEW_INSTANCE])
            ok_steps = all(s["rc"] == 0 and s["err"] == 0 for s in rec["posttest"])
            ok_out = all(rec[k]["nonfinite"] == 0 and rec[k]["max_abs_err_vs_cudnn"] < 0.05
                         for k in ("out_warm", "out_new_instance"))
            rec["works"] = bool(ok_steps and ok_out and rec["warm_call"]["rc"] == 0 and rec["warm_call"]["sync_err"] == 0
                                and rec["warm_call"]["nonfinite"] == 0 and rec.get("filter_status", 0) == 0
                                and rec["prefilter_status"] == 0)
        except Exception as e:  # noqa: BLE001
            rec["works"] = False
            rec["exception"] = f"{type(e).__name__}: {e}"
            try:  # a fault in the runner must not leave the worker's context broken: check it
                self.torch.cuda.synchronize()
            except Exception as e2:  # noqa: BLE001
                rec["worker_context_after"] = str(e2)
        finally:
            if worker_nondumpable:
                libc.prctl(4, 1, 0, 0, 0)
            if r is not None:
                rec["denied"] = r.denied()
                rec["denied_distinct"], rec["denied_total"] = int(r.box.denied_count), int(r.box.denied_total)
                r.close()
            if kmsg_before is not None:
                after = kernel_log()
                new = after[len(kmsg_before):] if after[:len(kmsg_before)] == kmsg_before else after[-60:]
                rec["kernel_log"] = [line for line in new if "1326" in line or "seccomp" in line.lower()][-60:]
                rec["kernel_log_lines_new"] = len(new)
        print(f"[seccomp] {name}: works={rec['works']} denied={[d['name'] for d in rec.get('denied', [])][:12]}"
              + (f" exception={rec['exception']}" if "exception" in rec else "")
              + (f" kernel_log={rec['kernel_log'][:8]}" if rec.get("kernel_log") else ""), flush=True)
        return rec

    def init_only(self, only_rule: int = -1, skip: tuple = ()) -> dict:
        """A runner with runner.c's pre-load stage at its start (one rule of it, or all but `skip`): does CUDA
        initialise under it?"""
        rec: dict = {}
        try:
            self.start_runner("errno", load=False, arenas=False, record=rec, only_rule=only_rule, skip=skip).close()
            rec["init_ok"] = True
        except RunnerGone as e:
            rec["init_ok"] = False
            rec["exception"] = str(e)
        return rec

    def part_seccomp(self) -> None:
        Runner.default_timeout = 15.0  # a runtime that hangs under a filter costs this much, not more
        out: list = []
        self.results["seccomp"] = out  # filled variant by variant
        deadline = time.time() + self.args.seccomp_budget
        # 1. which rule of the pre-load stage does CUDA's initialisation trip on? each rule alone
        single = []
        self.results["seccomp_single_rule_init"] = single
        for rule, name in enumerate(RULE_NAMES):
            if time.time() > deadline:
                self.results["errors"].append("seccomp: budget spent in the single-rule tests")
                break
            rec = self.init_only(only_rule=rule)
            single.append({"rule": name, **rec})
        culprits = tuple(i for i, rec in enumerate(single) if not rec["init_ok"])
        print(f"[seccomp] rules alone that stop CUDA init: {[RULE_NAMES[i] for i in culprits]}", flush=True)
        self.results["seccomp_culprits"] = [RULE_NAMES[i] for i in culprits]
        all_but = self.init_only(skip=culprits)
        self.results["seccomp_init_all_but_culprits"] = all_but
        if not all_but["init_ok"] and time.time() < deadline:  # a combination: leave one rule out at a time
            leave = []
            self.results["seccomp_leave_one_out_init"] = leave
            for rule, name in enumerate(RULE_NAMES):
                if time.time() > deadline:
                    break
                leave.append({"left_out": name, **self.init_only(skip=(rule,))})
        # 2. whole runs (start-up, warm-up call, the post-test) under the filters in several orders
        variants = [
            ("runner.c order: pre stage at start, post stage right after dlopen (errno)", "errno", "after_load",
             G_ALL),
            ("post stage right after dlopen, no pre stage (errno)", "none", "after_load", G_ALL),
            ("CUDA init, then pre stage, IPC open, dlopen, post stage (errno)", "none", "after_load", G_ALL,
             "errno", None, False, (), True),
            ("CUDA init, then pre stage, IPC open, dlopen, post stage (trap+log)", "none", "after_load", G_ALL,
             "trap", None, False, (), True),
            ("as above, worker non-dumpable as runner.py makes it (errno)", "none", "after_load", G_ALL,
             "errno", None, True, (), True),
            ("runner.c order in log mode (SECCOMP_RET_LOG: allowed, kernel-logged)", "log", "after_load", G_ALL,
             "log"),
        ]
        if culprits:
            variants.insert(1, ("runner.c order without the culprit rules (errno)", "errno", "after_load", G_ALL,
                                "errno", None, False, culprits))
            variants.insert(2, ("runner.c order without the culprit rules (trap+log)", "trap", "after_load", G_ALL,
                                "trap", None, False, culprits))
        for v in variants:
            if time.time() > deadline + 30:
                self.results["errors"].append(f"seccomp: no time left for '{v[0]}'")
                continue
            out.append(self.seccomp_variant(*v))
        self.filtered_start = next(({"prefilter": "none", "pre_after_init": 0} for rec in out
                                    if rec["variant"].startswith("CUDA init, then pre stage") and rec["works"]
                                    and rec["mode"] == "errno"), None)


    # -- Q1, Q5, Q3 ------------------------------------------------------------------------------------------
    def part_timing(self) -> None:
        torch = self.torch
        Runner.default_timeout = 30.0
        filtered = getattr(self, "filtered_start", None)  # an order of filters that CUDA ran under (part seccomp)
        use_filters = filtered is not None
        pre_after_init = 0 if use_filters else None
        startup: dict = {"filters": "CUDA init, then pre stage, IPC open, dlopen, post stage" if use_filters else "none"}
        self.results["startup"] = startup
        t0 = time.perf_counter()
        try:
            r = self.start_runner("none", record=startup, pre_after_init=pre_after_init)
            if use_filters:
                r.serve(C_FILTER, F_LOADED | G_ALL)
                startup["post_filter_status"] = int(r.box.status)
        except RunnerGone as e:
            if not use_filters:
                raise
            self.results["errors"].append(f"timing runner with filters: {e}; again without")
            pre_after_init, use_filters = None, False
            startup.clear()
            startup["filters"] = "none (the filtered start failed)"
            t0 = time.perf_counter()
            r = self.start_runner("none", record=startup)
        first = []
        for i, a in enumerate(self.arenas):
            self.poison(a)
            ms = r.serve(C_CALL, F_SYNC, i) * 1e3
            first.append({"scenario": a["s"].name, "first_call_ms": ms, "rc": r.rcs(1)[0], "sync_err": r.errs(1)[0],
                          **self.check(a)})
        startup["first_calls"] = first
        if use_filters and any(c["rc"] or c["sync_err"] or c["nonfinite"] for c in first):
            self.results["errors"].append("the filtered timing runner's first calls failed; timing without filters")
            r.close()
            startup["filtered_first_calls_failed"], startup["filters"] = first, "none (filtered calls failed)"
            pre_after_init, use_filters = None, False
            r = self.start_runner("none", record=startup)
            first = []
            for i, a in enumerate(self.arenas):
                self.poison(a)
                ms = r.serve(C_CALL, F_SYNC, i) * 1e3
                first.append({"scenario": a["s"].name, "first_call_ms": ms, "rc": r.rcs(1)[0],
                              "sync_err": r.errs(1)[0], **self.check(a)})
            startup["first_calls"] = first
        startup["total_to_first_result_ms"] = (time.perf_counter() - t0) * 1e3
        print(f"[startup] {json.dumps(startup, default=str)}", flush=True)
        self.runner = r
        capture = []
        self.runner_graphs = set()
        for i, a in enumerate(self.arenas):
            r.serve(C_CAPTURE, arena=i)
            capture.append({"scenario": a["s"].name, "err": r.errs(2), "rc": r.rcs(1)[0]})
            if r.errs(1)[0] == 0:
                self.poison(a)
                r.serve(C_CALL, F_SYNC | F_GRAPH, i)
                capture[-1].update(self.check(a), replay_err=r.errs(2))
                if r.errs(2) == [0, 0]:
                    self.runner_graphs.add(i)
        self.results["runner_capture"] = capture
        clean = self.start_runner("none", load=False, arenas=False, record=self.results.setdefault("startup_clean", {}),
                                  pre_after_init=pre_after_init)
        clean.serve(C_CAPTURE, arena=-1)
        clean_graph_ok = clean.errs(2)[1] == 0
        self.clean = clean
        # in-process seed: correctness, graph
        inproc = []
        self.seed_graphs, self.cudnn_graphs = {}, {}
        for i, a in enumerate(self.arenas):
            self.poison(a)
            self.seed(a)()
            torch.cuda.synchronize()
            inproc.append({"scenario": a["s"].name, **self.check(a)})
            try:
                self.seed_graphs[i] = self.graph_of(self.seed(a))
            except Exception as e:  # noqa: BLE001
                self.results["errors"].append(f"seed graph {a['s'].name}: {e}")
            try:
                self.cudnn_graphs[i] = self.graph_of(self.cudnn(a))
            except Exception as e:  # noqa: BLE001
                self.results["errors"].append(f"cudnn graph {a['s'].name}: {e}")
        self.results["inprocess_check"] = inproc
        self.results["spin_cycles"] = SPIN_CYCLES
        null_graph = self.graph_of(self.null_kernel)
        # warm every path
        for i, a in enumerate(self.arenas):
            for _ in range(3):
                self.events_ms(self.seed(a))
                self.events_ms(self.cudnn(a))
                self.runner_ms(r, C_CALL, F_SYNC, i)
                self.runner_ms(r, C_CALL, F_SPIN | F_SYNC, i)
                self.wall_ms(self.cudnn(a))
                self.wall_ms(self.spun(self.cudnn(a)))
        for flags in (0, F_SYNC, F_NULLK | F_SYNC, F_SPIN | F_NULLK | F_SYNC) + ((F_GRAPH | F_SYNC,) if clean_graph_ok else ()):
            for _ in range(5):
                self.runner_ms(clean, C_PING, flags)
        print(f"[timing] warm; slack {self.slack} cycles; runner graphs {sorted(self.runner_graphs)}; "
              f"seed graphs {sorted(self.seed_graphs)}; cudnn graphs {sorted(self.cudnn_graphs)}", flush=True)
        rng = random.Random(7)
        table: list = []
        self.results["timing"] = table  # filled row by row: a failure later keeps the rows measured
        for i, a in enumerate(self.arenas):
            s = a["s"]
            m: dict[str, list[float]] = {}
            methods = {
                "ev_seed": lambda: self.events_ms(self.seed(a)),
                "ev_cudnn": lambda: self.events_ms(self.cudnn(a)),
                "wr_seed": lambda: self.runner_ms(r, C_CALL, F_SYNC, i),
                "ww_seed": lambda: self.wall_ms(self.seed(a)),
                "ww_cudnn": lambda: self.wall_ms(self.cudnn(a)),
                "nr_empty": lambda: self.runner_ms(clean, C_PING, 0),
                "nr_sync": lambda: self.runner_ms(clean, C_PING, F_SYNC),
                "nr_kern": lambda: self.runner_ms(clean, C_PING, F_NULLK | F_SYNC),
                "nw_sync": lambda: self.wall_ms(lambda: None),
                "nw_kern": lambda: self.wall_ms(self.null_kernel),
                "nw_graph": lambda: self.wall_ms(null_graph),
                "wr_seed_spin": lambda: self.runner_ms(r, C_CALL, F_SPIN | F_SYNC, i),
                "nr_kern_spin": lambda: self.runner_ms(clean, C_PING, F_SPIN | F_NULLK | F_SYNC),
                "ww_cudnn_spin": lambda: self.wall_ms(self.spun(self.cudnn(a))),
                "nw_kern_spin": lambda: self.wall_ms(self.spun(self.null_kernel)),
                "wr_seed_pre": lambda: self.runner_pre_ms(r, C_CALL, F_SYNC, i),
                "nr_kern_pre": lambda: self.runner_pre_ms(clean, C_PING, F_NULLK | F_SYNC),
                "nr_sync_pre": lambda: self.runner_pre_ms(clean, C_PING, F_SYNC),
                "wr_seed_spin_pre": lambda: self.runner_pre_ms(r, C_CALL, F_SPIN | F_SYNC, i),
                "nr_kern_spin_pre": lambda: self.runner_pre_ms(clean, C_PING, F_SPIN | F_NULLK | F_SYNC),
            }
            if clean_graph_ok:
                methods["nr_graph"] = lambda: self.runner_ms(clean, C_PING, F_GRAPH | F_SYNC)
            if i in self.runner_graphs:
                methods["wr_seed_graph"] = lambda: self.runner_ms(r, C_CALL, F_SYNC | F_GRAPH, i)
            if i in self.cudnn_graphs:
                methods["ev_cudnn_graph"] = lambda: self.events_ms(self.cudnn_graphs[i])
                methods["ww_cudnn_graph"] = lambda: self.wall_ms(self.cudnn_graphs[i])
            if i in self.seed_graphs:
                methods["ev_seed_graph"] = lambda: self.events_ms(self.seed_graphs[i])
                methods["ww_seed_graph"] = lambda: self.wall_ms(self.seed_graphs[i])
            names = list(methods)
            for _ in range(self.args.rounds):
                rng.shuffle(names)
                for n in names:
                    m.setdefault(n, []).append(methods[n]())
            med_ = {n: med(v) for n, v in m.items()}
            row = {"scenario": s.name, "rounds": self.args.rounds, "median_ms": med_,
                   "p10_p90_ms": {n: (sorted(v)[len(v) // 10], sorted(v)[(9 * len(v)) // 10]) for n, v in m.items()},
                   "samples_ms": m}
            table.append(row)
            row["tflops_ev_seed"] = s.flops / (med_["ev_seed"] * 1e-3) / 1e12
            row["ratios"] = self.ratios(med_)
            print(f"[timing] {s.name}: ev_seed {med_['ev_seed']:.4f} ev_cudnn {med_['ev_cudnn']:.4f} "
                  f"wr_seed {med_['wr_seed']:.4f} ww_cudnn {med_['ww_cudnn']:.4f} nr_sync {med_['nr_sync']:.4f} "
                  f"nr_kern {med_['nr_kern']:.4f} nw_sync {med_['nw_sync']:.4f} nw_kern {med_['nw_kern']:.4f} | "
                  + " ".join(f"{k}={v:.4f}" for k, v in row["ratios"].items()), flush=True)
        self.results["launch_slack_cycles"] = self.slack
        keys = table[0]["ratios"].keys()
        self.results["geomeans"] = {k: geomean([row["ratios"].get(k) for row in table]) for k in keys}
        # the check that the runner's output stays right after all the timing
        self.results["after_timing_check"] = []
        for i, a in enumerate(self.arenas):
            self.poison(a)
            r.serve(C_CALL, F_SYNC, i)
            self.results["after_timing_check"].append({"scenario": a["s"].name, **self.check(a)})

    @staticmethod
    def ratios(m: dict) -> dict:
        """seed/cuDNN by each pairing of clocks and nulls (medians, nulls subtracted as medians)."""
        out = {"E: events": m["ev_seed"] / m["ev_cudnn"]}
        out["W1: runner-nr_sync / worker-nw_sync"] = (m["wr_seed"] - m["nr_sync"]) / (m["ww_cudnn"] - m["nw_sync"])
        out["W2: runner-nr_kern / worker-nw_kern"] = (m["wr_seed"] - m["nr_kern"]) / (m["ww_cudnn"] - m["nw_kern"])
        if "ww_cudnn_graph" in m:
            out["W3 (d): runner-nr_kern / cudnn graph-nw_graph"] = \
                (m["wr_seed"] - m["nr_kern"]) / (m["ww_cudnn_graph"] - m["nw_graph"])
            out["W3s: runner-nr_sync / cudnn graph-nw_sync"] = \
                (m["wr_seed"] - m["nr_sync"]) / (m["ww_cudnn_graph"] - m["nw_sync"])
            if "wr_seed_graph" in m and "nr_graph" in m:
                out["W4: runner graph-nr_graph / cudnn graph-nw_graph"] = \
                    (m["wr_seed_graph"] - m["nr_graph"]) / (m["ww_cudnn_graph"] - m["nw_graph"])
            if "ev_cudnn_graph" in m:
                out["E_g: events, cudnn graph"] = m["ev_seed"] / m["ev_cudnn_graph"]
        out["W5: spin first: runner-nr_kern_spin / cudnn-nw_kern_spin"] = \
            (m["wr_seed_spin"] - m["nr_kern_spin"]) / (m["ww_cudnn_spin"] - m["nw_kern_spin"])
        out["W6: switched first: runner_pre-nr_kern_pre / cudnn graph-nw_graph"] = \
            (m["wr_seed_pre"] - m["nr_kern_pre"]) / (m["ww_cudnn_graph"] - m["nw_graph"]) if "ww_cudnn_graph" in m else None
        out["W7: switched+spin: runner-nr_kern_spin_pre / cudnn graph-nw_graph"] = \
            (m["wr_seed_spin_pre"] - m["nr_kern_spin_pre"]) / (m["ww_cudnn_graph"] - m["nw_graph"]) if "ww_cudnn_graph" in m else None
        out["W8: spin both: runner-nr_kern_spin / cudnn graph-nw_graph"] = \
            (m["wr_seed_spin"] - m["nr_kern_spin"]) / (m["ww_cudnn_graph"] - m["nw_graph"]) if "ww_cudnn_graph" in m else None
        out["W0: in-process wall seed-nw_kern / cudnn-nw_kern"] = (m["ww_seed"] - m["nw_kern"]) / (m["ww_cudnn"] - m["nw_kern"])
        # one kernel's two clocks
        out["seed: runner-nr_kern over events"] = (m["wr_seed"] - m["nr_kern"]) / m["ev_seed"]
        out["seed: runner-nr_sync over events"] = (m["wr_seed"] - m["nr_sync"]) / m["ev_seed"]
        out["cudnn: wall-nw_kern over events"] = (m["ww_cudnn"] - m["nw_kern"]) / m["ev_cudnn"]
        out["seed: spin runner-nr_kern_spin over events"] = (m["wr_seed_spin"] - m["nr_kern_spin"]) / m["ev_seed"]
        out["cudnn: spin wall-nw_kern_spin over events"] = (m["ww_cudnn_spin"] - m["nw_kern_spin"]) / m["ev_cudnn"]
        out["seed: switched runner-nr_kern_pre over events"] = (m["wr_seed_pre"] - m["nr_kern_pre"]) / m["ev_seed"]
        out["seed: switched runner-nr_sync_pre over events"] = (m["wr_seed_pre"] - m["nr_sync_pre"]) / m["ev_seed"]
        out["seed: switched+spin runner-nr_kern_spin_pre over events"] = \
            (m["wr_seed_spin_pre"] - m["nr_kern_spin_pre"]) / m["ev_seed"]
        if "ww_cudnn_graph" in m:
            out["cudnn: graph wall-nw_graph over events"] = (m["ww_cudnn_graph"] - m["nw_graph"]) / m["ev_cudnn"]
        return {k: v for k, v in out.items() if v is not None}

    # -- Q4 -----------------------------------------------------------------------------------------------------
    def part_early(self) -> None:
        """Q4: the runner stops right after launching (no synchronisation); the worker reads 1024 random output
        elements through its own mapping at once. Longest scenario first (10 times, then 5 times with a
        synchronisation of the worker's own context before the read), then 5 times on three shorter ones."""
        out = []
        self.results["early_all"] = out
        for index, reps, sync_first in ((LONGEST, 10, 5), (5, 5, 0), (2, 5, 0), (0, 5, 0)):
            rec = self.early_one(index, reps, sync_first)
            out.append(rec)
            if index == LONGEST:
                self.results["early"] = rec

    def early_one(self, index: int, count: int, sync_first: int) -> dict:
        torch, r = self.torch, self.runner
        a = self.arenas[index]
        o = a["t"]["o"].reshape(-1)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(99 + index)
        idx = torch.randint(0, o.numel(), (1024,), generator=gen, device="cuda")
        rec: dict = {"scenario": a["s"].name}

        def read():
            t0 = time.perf_counter()
            vals = o[idx].float().cpu()
            return (time.perf_counter() - t0) * 1e3, int(torch.isnan(vals).sum())

        idle = []
        for _ in range(5):
            torch.cuda.synchronize()
            idle.append(read()[0])
        rec["read_ms_idle_gpu"] = idle
        reps = []
        for k in range(count + sync_first):
            self.poison(a)
            self.flush_sync()
            reply_ms = r.serve(C_CALL, 0, index) * 1e3  # the runner stops right after launching
            rep = {"reply_ms": reply_ms, "rc": r.rcs(1)[0]}
            if k >= count:  # a variant: the worker synchronizes its own context first
                t0 = time.perf_counter()
                torch.cuda.synchronize()
                rep["worker_sync_ms"] = (time.perf_counter() - t0) * 1e3
            rep["read_ms"], rep["nan_of_1024"] = read()
            t0 = time.perf_counter()
            r.serve(C_PING, F_SYNC)  # continue the runner: it waits for its own kernel
            rep["runner_sync_after_ms"] = (time.perf_counter() - t0) * 1e3
            rep["sync_err"] = r.errs(1)[0]
            rep.update(self.check(a))
            reps.append(rep)
            print(f"[early] {a['s'].name} {json.dumps(rep)}", flush=True)
        rec["reps"] = reps[:count]
        rec["reps_worker_sync_first"] = reps[count:]
        rec["kernel_event_ms"] = next((row["median_ms"]["ev_seed"] for row in self.results.get("timing", [])
                                       if row["scenario"] == a["s"].name), None)
        return rec

    def close(self) -> None:
        for name in ("runner", "clean"):
            if hasattr(self, name):
                getattr(self, name).close()


def summarize(res: dict) -> str:
    lines = []
    d = res.get("device", {})
    lines.append(f"device: {d.get('name')} torch {d.get('torch')} cuda {d.get('torch_cuda')} cudnn {d.get('cudnn')}")
    for rec in res.get("seccomp", []):
        bad = [f"{s['step']}: rc {s['rc']} err {s['err']}" for s in rec.get("posttest", []) if s["rc"] or s["err"]]
        lines.append(f"seccomp | {rec['variant']}: works={rec['works']} filter_status={rec.get('filter_status')} "
                     f"prefilter={rec.get('prefilter_status')} denied={[(x['name'], x['path'] or x['arg']) for x in rec.get('denied', [])][:10]} "
                     f"failing={bad} {rec.get('exception', '')}")
    if "seccomp_single_rule_init" in res:
        bad = [x["rule"] + ": " + x.get("exception", "") for x in res["seccomp_single_rule_init"] if not x["init_ok"]]
        lines.append(f"seccomp | single rules at start tested: {len(res['seccomp_single_rule_init'])}; "
                     f"stopping CUDA init: {bad}; all but those: {res.get('seccomp_init_all_but_culprits')}")
    if "seccomp_leave_one_out_init" in res:
        lines.append("seccomp | leave-one-out, init ok without: "
                     f"{[x['left_out'] for x in res['seccomp_leave_one_out_init'] if x['init_ok']]}")
    st = res.get("startup")
    if st:
        lines.append(f"startup: spawn {st.get('spawn_to_first_stop_ms', 0):.1f} ms, init {st.get('init_ms', 0):.1f} ms, "
                     f"open {st.get('open_ms', 0):.2f} ms for 6 handles (runner clock per handle us {st.get('open_runner_us')}), "
                     f"load {st.get('load_ms', 0):.1f} ms; first calls ms "
                     + ", ".join(f"{c['first_call_ms']:.2f}" for c in st.get("first_calls", [])))
    if res.get("timing"):
        keys = list(res["timing"][0]["ratios"].keys())
        lines.append("timing medians (ms): scenario | ev_seed ev_cudnn | wr_seed ww_cudnn ww_cudnn_graph | "
                     "nr_sync nr_kern nr_graph | nw_sync nw_kern nw_graph | wr_seed_spin nr_kern_spin ww_cudnn_spin "
                     "nw_kern_spin | nr_empty ww_seed wr_seed_graph")
        for row in res["timing"]:
            m = row["median_ms"]
            g = lambda k: f"{m[k]:.4f}" if k in m else "-"  # noqa: E731
            lines.append(f"  {row['scenario']} | {g('ev_seed')} {g('ev_cudnn')} | {g('wr_seed')} {g('ww_cudnn')} "
                         f"{g('ww_cudnn_graph')} | {g('nr_sync')} {g('nr_kern')} {g('nr_graph')} | {g('nw_sync')} "
                         f"{g('nw_kern')} {g('nw_graph')} | {g('wr_seed_spin')} {g('nr_kern_spin')} "
                         f"{g('ww_cudnn_spin')} {g('nw_kern_spin')} | {g('nr_empty')} {g('ww_seed')} {g('wr_seed_graph')}")
        for k in keys:
            vals = " ".join(f"{row['ratios'].get(k, float('nan')):.4f}" for row in res["timing"])
            lines.append(f"  {k}: {vals} | geomean {res['geomeans'].get(k, float('nan')):.4f}")
    for e in res.get("early_all") or ([res["early"]] if res.get("early") else []):
        lines.append(f"early reply ({e['scenario']}, kernel {e.get('kernel_event_ms')} ms by events): "
                     f"idle read ms {[round(x, 3) for x in e['read_ms_idle_gpu']]}")
        for rep in e["reps"] + e["reps_worker_sync_first"]:
            lines.append("  " + json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rep.items()
                                            if k not in ("rc", "sync_err")}))
    for err in res.get("errors", []):
        lines.append(f"ERROR: {err[:400]}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--only", default="seccomp,timing,early")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds (informational)")
    ap.add_argument("--seccomp-budget", type=float, default=60.0, help="seconds for the rule-by-rule init tests")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    probe = Probe(args)
    probe.deadline = started + args.budget - 60
    res = probe.results
    res["date_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    parts = args.only.split(",")

    def save():
        res["elapsed_s"] = time.time() - started
        with open(os.path.join(args.out, "probe.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)

    try:
        probe.setup()
        probe.load_seed()
    except Exception:  # noqa: BLE001
        res["errors"].append("setup: " + traceback.format_exc())
        save()
        print(summarize(res))
        return 1
    for part, fn in (("seccomp", probe.part_seccomp), ("timing", probe.part_timing), ("early", probe.part_early)):
        if part not in parts:
            continue
        t0 = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001
            res["errors"].append(f"{part}: " + traceback.format_exc())
            print(f"[{part}] FAILED: {traceback.format_exc()}", flush=True)
        res.setdefault("part_seconds", {})[part] = time.time() - t0
        save()
    probe.close()
    save()
    text = summarize(res)
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    print("=" * 30 + " SUMMARY")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
