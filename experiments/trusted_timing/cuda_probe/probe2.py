#!/usr/bin/env python3
"""Second CUDA runner probe (FINDINGS.md, "Second probe: a safe design"): a timing method in which every time
comes from a request the candidate's runner cannot shape, measured against CUDA events.

    python3 probe2.py --runner BUILD/runner_cuda --kernel BUILD/kernel.so --out DIR [--rounds 300] [--passes 2]

The seed runs in a `runner_cuda` process (probe.py's protocol, with the filters in the order that worked). The
speed reference, cuDNN through torch SDPA, runs in a trusted *reference runner*: this same file started with
`--ref-runner FD BYTES`, a Python process driven by the same SIGCONT / raise(SIGSTOP) protocol and mailbox,
that reads its inputs from the same IPC arenas, replays SDPA captured in a CUDA graph, synchronises and stops.
A clean runner_cuda (CUDA initialised, nothing loaded) gives the nulls.

Methods per scenario, all interleaved in a shuffled order in every round, each after the worker's L2 flush:
  ev_seed, ev_cudnn, ev_cudnn_graph  method (a): backends/cuda.py's time_call in the worker (probe.py events_ms)
  wr_seed        seed runner: SIGCONT -> stopped, the call + cudaStreamSynchronize
  wq_cudnn       reference runner: SIGCONT -> stopped, graph replay + synchronize
  nr_kern        clean runner: null kernel + synchronize;    nr_sync: synchronize only
  nq_graph       reference runner: null graph replay + synchronize (its own null, trusted)
  wr_seed_graph  seed runner replaying its own captured graph (diagnostic only: host dispatch of the seed)
  gr_seed, gq_cudnn, gn_kern  as wr_seed, wq_cudnn, nr_kern, but the clock stops once a gather of 1024 random
                 output elements on the worker's stream, copied to the host, has completed after the stop
                 (outputs poisoned with NaN before; the NaN count of every gather is kept)
  gw_idle        the worker's gather alone after a flush (no runner)
S1 = (wr_seed - nr_kern) / (wq_cudnn - nr_kern); S2 = wr_seed / wq_cudnn; S3 = (gr_seed - gn_kern) / (gq_cudnn -
gn_kern); E = ev_seed / ev_cudnn (medians). Nothing here changes clocks or device settings.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe as P  # noqa: E402  (the first probe: Mailbox, Runner, Probe; no heavy imports at module level)

REF_OUT_SLOT = 8  # mailbox slots 8..13 carry the reference runner's exported outputs
GATHER_N = 1024


class IpcHandle(ctypes.Structure):  # cudaIpcMemHandle_t, passed by value
    _fields_ = [("reserved", ctypes.c_char * 64)]


def _bind_cudart(cudart) -> None:
    c = ctypes
    cudart.cudaIpcOpenMemHandle.argtypes = [c.POINTER(c.c_void_p), IpcHandle, c.c_uint]
    cudart.cudaIpcOpenMemHandle.restype = c.c_int
    cudart.cudaIpcCloseMemHandle.argtypes = [c.c_void_p]
    cudart.cudaIpcCloseMemHandle.restype = c.c_int
    cudart.cudaGraphLaunch.argtypes = [c.c_void_p, c.c_void_p]
    cudart.cudaGraphLaunch.restype = c.c_int
    cudart.cudaStreamSynchronize.argtypes = [c.c_void_p]
    cudart.cudaStreamSynchronize.restype = c.c_int
    cudart.cudaMemcpy.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.c_int]
    cudart.cudaMemcpy.restype = c.c_int


def ipc_open(cudart, handle: bytes) -> tuple[int, int]:
    h = IpcHandle()
    ctypes.memmove(ctypes.addressof(h), handle, 64)
    ptr = ctypes.c_void_p()
    e = cudart.cudaIpcOpenMemHandle(ctypes.byref(ptr), h, 1)  # cudaIpcMemLazyEnablePeerAccess
    return int(e), int(ptr.value or 0)


# =====================================================================================================
# The reference runner (trusted): a Python process with runner_cuda's protocol
# =====================================================================================================
class RefServer:
    def __init__(self, box) -> None:
        self.box = box
        self.graphs, self.execs, self.prep, self.outs, self.direct = {}, {}, {}, {}, {}
        self.null_graph = self.null_exec = None
        self.fast = False

    def init(self) -> None:
        b = self.box
        t0 = time.perf_counter()
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.F, self.backends, self.sdpa_kernel = torch, F, [SDPBackend.CUDNN_ATTENTION], sdpa_kernel
        b.t_us[0] = (time.perf_counter() - t0) * 1e6
        torch.cuda.init()
        torch.cuda.set_device(0)
        self.stream = torch.cuda.Stream()
        torch.cuda.set_stream(self.stream)
        self.tiny = torch.zeros(1, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        b.t_us[1] = (time.perf_counter() - t0) * 1e6
        self.cudart, path = P.find_cudart()
        _bind_cudart(self.cudart)
        self.sh = ctypes.c_void_p(self.stream.cuda_stream)
        b.path = path.encode()[:511]
        # the null graph, and whether its raw cudaGraphExec_t can be launched through ctypes (the lean path)
        self.null_graph, _ = self.capture(lambda: self.tiny.fill_(1.0))
        try:
            ex = int(self.null_graph.raw_cuda_graph_exec())
            e1 = self.cudart.cudaGraphLaunch(ctypes.c_void_p(ex), self.sh)
            e2 = self.cudart.cudaStreamSynchronize(self.sh)
            self.fast = ex != 0 and e1 == 0 and e2 == 0
            if self.fast:
                self.null_exec = ctypes.c_void_p(ex)
            b.rc[1], b.rc[2] = e1, e2
        except Exception as e:  # noqa: BLE001
            self.fast = False
            b.error = f"raw_cuda_graph_exec: {type(e).__name__}: {e}".encode()[:255]
        b.rc[0] = int(self.fast)
        b.t_us[2] = (time.perf_counter() - t0) * 1e6

    def capture(self, fn):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(self.stream)
        with torch.cuda.stream(side):
            fn()  # warm-up on a side stream, as torch's docs advise
        self.stream.wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        return g, out

    def open(self, first: int, last: int) -> None:
        """Open the worker's arenas and copy q, k, v once into [b, h, s, d] (the reference's prepare step)."""
        torch, b = self.torch, self.box
        for i in range(first, last):
            t0 = time.perf_counter()
            e, base = ipc_open(self.cudart, bytes(b.handles[i]))
            b.err[i - first] = e
            if e:
                continue
            d = b.calls[i]
            shape = (d.batch, d.seqlen_q, d.heads_q, d.head_dim)
            n = d.batch * d.seqlen_q * d.heads_q * d.head_dim
            prep = []
            torch.cuda.synchronize()
            for off in (d.off_q, d.off_k, d.off_v):
                t = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
                e = self.cudart.cudaMemcpy(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(base + off), 2 * n, 3)
                if e:
                    b.err[i - first] = 1000 + e
                prep.append(t)
            torch.cuda.synchronize()
            self.prep[i] = tuple(t.transpose(1, 2).contiguous() for t in prep)
            torch.cuda.synchronize()
            scale, causal = 1.0 / math.sqrt(d.head_dim), bool(d.causal)
            q, k, v = self.prep[i]

            def sdpa(q=q, k=k, v=v, scale=scale, causal=causal):
                with self.sdpa_kernel(self.backends):
                    return self.F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                               enable_gqa=False)
            self.direct[i] = sdpa
            b.t_us[i - first] = (time.perf_counter() - t0) * 1e6

    def capture_arena(self, a: int) -> None:
        """Capture arena a's SDPA into a graph, export its output (CUDA IPC) to the worker."""
        b = self.box
        g, out = self.capture(self.direct[a])
        self.graphs[a] = g
        if self.fast:
            self.execs[a] = ctypes.c_void_p(int(g.raw_cuda_graph_exec()))
        self.outs[a] = out
        b.rc[0] = int(out.is_contiguous())
        slot = REF_OUT_SLOT + a
        st = out.stride()  # [b, h, s, d] strides, for the worker's view
        b.calls[slot].batch, b.calls[slot].heads_q, b.calls[slot].seqlen_q, b.calls[slot].head_dim = st
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            fn = cuda.cuMemGetAddressRange_v2
            fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
            fn.restype = ctypes.c_int
            b.err[0] = fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(out.data_ptr()))
        except Exception as e:  # noqa: BLE001
            b.err[0] = -1
            b.error = f"cuMemGetAddressRange: {type(e).__name__}: {e}".encode()[:255]
        if b.err[0]:
            return
        handle = (ctypes.c_ubyte * 64)()
        b.err[1] = self.cudart.cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(base.value))
        ctypes.memmove(ctypes.addressof(b.handles[slot]), handle, 64)
        b.calls[slot].off_o = out.data_ptr() - base.value
        b.calls[slot].off_q = out.numel()
        b.calls[slot].off_k = size.value

    # the timed paths: as lean as runner_cuda's (a ctypes graph launch and a stream synchronize)
    def call(self, a: int, flags: int) -> None:
        b = self.box
        if flags & P.F_GRAPH:
            if self.fast:
                b.err[1] = self.cudart.cudaGraphLaunch(self.execs[a], self.sh)
            else:
                self.graphs[a].replay()
        else:
            self.direct[a]()
        if flags & P.F_SYNC:
            b.err[0] = self.cudart.cudaStreamSynchronize(self.sh)

    def ping(self, flags: int) -> None:
        b = self.box
        if flags & P.F_NULLK:
            self.tiny.fill_(1.0)
        if flags & P.F_GRAPH:
            if self.fast:
                b.err[1] = self.cudart.cudaGraphLaunch(self.null_exec, self.sh)
            else:
                self.null_graph.replay()
        if flags & P.F_SYNC:
            b.err[0] = self.cudart.cudaStreamSynchronize(self.sh)


def ref_runner_main(fd: int, nbytes: int) -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG, as runner_cuda
    mm = mmap.mmap(fd, nbytes)
    os.close(fd)
    box = P.Mailbox.from_buffer(mm)
    box.struct_size = ctypes.sizeof(P.Mailbox)
    anywhere = os.sched_getaffinity(0)
    server = RefServer(box)
    gc.disable()
    pid = os.getpid()
    served = 0
    os.kill(pid, signal.SIGSTOP)
    while True:
        request = box.request
        while request == served:
            request = box.request
        served = request
        os.sched_setaffinity(0, anywhere)
        command = box.command
        try:
            if command == P.C_CALL:
                server.call(box.arena, box.flags)
            elif command == P.C_PING:
                server.ping(box.flags)
            elif command == P.C_INIT:
                server.init()
            elif command == P.C_OPEN:
                server.open(box.arena, box.arena2)
            elif command == P.C_CAPTURE:
                server.capture_arena(box.arena)
            else:
                box.status = -2
        except Exception as e:  # noqa: BLE001
            box.status = -1
            box.error = f"{type(e).__name__}: {e}".encode(errors="replace")[:255]
            print(f"[ref-runner] command {command}: {traceback.format_exc()}", file=sys.stderr, flush=True)
        box.reply = served
        os.kill(pid, signal.SIGSTOP)


class RefRunner(P.Runner):
    """The reference runner process: probe.Runner's protocol (serve, _await, close), another program."""

    def __init__(self, cpu: int, timeout: float = 60.0) -> None:  # noqa: D107 (probe.Runner's __init__ not called)
        fd = os.memfd_create("probe2-ref-mailbox", 0)
        try:
            os.ftruncate(fd, P.MAILBOX_BYTES)
            self.mm = mmap.mmap(fd, P.MAILBOX_BYTES)
            started = time.perf_counter()
            self.pid = os.posix_spawn(sys.executable, [sys.executable, os.path.abspath(__file__), "--ref-runner",
                                                       str(fd), str(P.MAILBOX_BYTES)], dict(os.environ))
        finally:
            os.close(fd)
        self.box = P.Mailbox.from_buffer(self.mm)
        self.cpu, self.seq, self.alive = cpu, 0, True
        self._await(timeout)
        self.spawn_s = time.perf_counter() - started
        if self.box.struct_size != ctypes.sizeof(P.Mailbox):
            self.close()
            raise P.RunnerGone("reference runner: mailbox layout differs")
        self.prefilter_status = 0

    def checked(self, command: int, **kw) -> float:
        self.box.status = 0
        t = self.serve(command, **kw)
        if self.box.status:
            raise P.RunnerGone(f"reference runner command {command}: status {self.box.status}: "
                               + self.box.error.decode(errors="replace"))
        return t


# =====================================================================================================
# The worker
# =====================================================================================================
def med(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def ratios(m: dict) -> dict:
    """Ratios seed/cuDNN by each method, from medians (ms). Keys missing from m give no entry."""
    out = {}

    def put(name, f):
        try:
            v = f()
            if v is not None and math.isfinite(v):
                out[name] = v
        except (KeyError, ZeroDivisionError):
            pass
    put("E", lambda: m["ev_seed"] / m["ev_cudnn"])
    put("E_g", lambda: m["ev_seed"] / m["ev_cudnn_graph"])
    put("S1", lambda: (m["wr_seed"] - m["nr_kern"]) / (m["wq_cudnn"] - m["nr_kern"]))
    put("S2", lambda: m["wr_seed"] / m["wq_cudnn"])
    put("S3", lambda: (m["gr_seed"] - m["gn_kern"]) / (m["gq_cudnn"] - m["gn_kern"]))
    put("S1r", lambda: (m["wr_seed"] - m["nr_kern"]) / (m["wq_cudnn"] - m["nq_graph"]))
    put("S1s", lambda: (m["wr_seed"] - m["nr_sync"]) / (m["wq_cudnn"] - m["nr_sync"]))
    put("S1g", lambda: (m["wr_seed_graph"] - m["nr_kern"]) / (m["wq_cudnn"] - m["nr_kern"]))
    put("S3stop", lambda: (m["gr_seed@stop"] - m["gn_kern@stop"]) / (m["gq_cudnn@stop"] - m["gn_kern@stop"]))
    # one kernel, two clocks
    put("seed net S1 / ev_seed", lambda: (m["wr_seed"] - m["nr_kern"]) / m["ev_seed"])
    put("cudnn net S1 / ev_cudnn", lambda: (m["wq_cudnn"] - m["nr_kern"]) / m["ev_cudnn"])
    put("cudnn net S1 / ev_cudnn_graph", lambda: (m["wq_cudnn"] - m["nr_kern"]) / m["ev_cudnn_graph"])
    put("cudnn - own null / ev_cudnn", lambda: (m["wq_cudnn"] - m["nq_graph"]) / m["ev_cudnn"])
    put("seed net S3 / ev_seed", lambda: (m["gr_seed"] - m["gn_kern"]) / m["ev_seed"])
    put("cudnn net S3 / ev_cudnn", lambda: (m["gq_cudnn"] - m["gn_kern"]) / m["ev_cudnn"])
    return out


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def bootstrap(samples: dict, key: str, reps: int = 200, seed: int = 3) -> tuple[float, float] | None:
    """90% interval of (method key)/E - 1 from resampling every method's samples (medians)."""
    rng = random.Random(seed)
    need = {"S1": ("wr_seed", "nr_kern", "wq_cudnn"), "S3": ("gr_seed", "gn_kern", "gq_cudnn"),
            "S2": ("wr_seed", "wq_cudnn"), "S1r": ("wr_seed", "nr_kern", "wq_cudnn", "nq_graph")}[key]
    names = ("ev_seed", "ev_cudnn") + need
    if any(not samples.get(n) for n in names):
        return None
    vals = []
    for _ in range(reps):
        m = {n: med(rng.choices(samples[n], k=len(samples[n]))) for n in names}
        r = ratios(m)
        if key in r and "E" in r:
            vals.append(r[key] / r["E"] - 1)
    vals.sort()
    return (vals[len(vals) // 20], vals[(19 * len(vals)) // 20]) if vals else None


class Probe2(P.Probe):
    def start_filtered(self, load: bool, arenas: bool, rec: dict) -> P.Runner:
        """probe.py's working order: CUDA init, then the pre stage, IPC open, dlopen, the post stage."""
        try:
            r = self.start_runner("none", load=load, arenas=arenas, record=rec, pre_after_init=0)
            if load:
                r.serve(P.C_FILTER, P.F_LOADED | P.G_ALL)
                rec["post_filter_status"] = int(r.box.status)
                if r.box.status:
                    r.close()
                    raise P.RunnerGone(f"post stage: {r.box.status}")
            rec["filters"] = "CUDA init, pre stage, IPC open, dlopen, post stage" if load else "pre stage after init"
            return r
        except P.RunnerGone as e:
            self.results["errors"].append(f"filtered runner failed ({e}); one without filters")
            rec.clear()
            rec["filters"] = "none (the filtered start failed)"
            return self.start_runner("none", load=load, arenas=arenas, record=rec)

    def start_all(self) -> None:
        res = self.results
        P.Runner.default_timeout = 30.0
        self.runner = self.start_filtered(True, True, res.setdefault("startup_seed", {}))
        self.clean = self.start_filtered(False, False, res.setdefault("startup_clean", {}))
        self.clean.serve(P.C_CAPTURE, arena=-1)
        # the seed's runner: first calls checked, its own graphs (diagnostic)
        r, first = self.runner, []
        self.runner_graphs = set()
        for i, a in enumerate(self.arenas):
            self.poison(a)
            ms = r.serve(P.C_CALL, P.F_SYNC, i) * 1e3
            first.append({"scenario": a["s"].name, "first_call_ms": ms, "rc": r.rcs(1)[0], "sync_err": r.errs(1)[0],
                          **self.check(a)})
            r.serve(P.C_CAPTURE, arena=i)
            if r.errs(1)[0] == 0:
                self.runner_graphs.add(i)
        res["seed_first_calls"] = first
        # the reference runner
        self.ref, self.ref_ok, self.ref_out, self.ref_flat = None, set(), {}, {}
        try:
            self.start_ref()
        except Exception:  # noqa: BLE001
            res["errors"].append("reference runner: " + traceback.format_exc())
            print(f"[startup] reference runner FAILED: {traceback.format_exc()}", flush=True)
        print(f"[startup] seed {json.dumps(res['startup_seed'], default=str)[:600]}", flush=True)

    def start_ref(self) -> None:
        torch, res = self.torch, self.results
        rec = res.setdefault("startup_ref", {})
        t0 = time.perf_counter()
        q = RefRunner(self.cpu)
        self.ref = q
        rec["spawn_ms"] = q.spawn_s * 1e3
        rec["init_ms"] = q.checked(P.C_INIT, timeout=180.0) * 1e3
        rec["init_runner_us"] = q.times_us(3)
        rec["fast_path"] = bool(q.box.rc[0])
        rec["fast_path_rc"] = q.rcs(3)
        rec["cudart"] = q.box.path.decode(errors="replace")
        rec["note"] = q.box.error.decode(errors="replace")
        self.fill_box(q)
        rec["open_ms"] = q.checked(P.C_OPEN, arena=0, arena2=len(self.arenas), timeout=60.0) * 1e3
        rec["open_errs"] = q.errs(len(self.arenas))
        if any(rec["open_errs"]):
            raise P.RunnerGone(f"reference runner: open {rec['open_errs']}")
        self.ref_out, self.ref_flat, self.ipc_opened = {}, {}, {}
        rec["captures"] = []
        for i, a in enumerate(self.arenas):
            s, c = a["s"], {"scenario": a["s"].name}
            rec["captures"].append(c)
            try:
                c["capture_ms"] = q.checked(P.C_CAPTURE, arena=i, timeout=60.0) * 1e3
                self.ref_ok.add(i)  # the graph exists; its output's export is checked next
                c["export_errs"], c["contiguous"] = q.errs(2), q.rcs(1)[0]
                slot = REF_OUT_SLOT + i
                handle, off = bytes(q.box.handles[slot]), int(q.box.calls[slot].off_o)
                c["numel"], c["segment_bytes"], c["offset"] = int(q.box.calls[slot].off_q), int(q.box.calls[slot].off_k), off
                if not any(c["export_errs"]):
                    if handle not in self.ipc_opened:
                        e, base = ipc_open(self.cudart, handle)
                        c["worker_open_err"] = e
                        if e == 0:
                            self.ipc_opened[handle] = base
                    if handle in self.ipc_opened:
                        n = s.batch * s.heads * s.seqlen * s.head_dim
                        d = q.box.calls[slot]
                        c["strides"] = strides = (int(d.batch), int(d.heads_q), int(d.seqlen_q), int(d.head_dim))
                        span = 1 + sum((size - 1) * st for size, st in
                                       zip((s.batch, s.heads, s.seqlen, s.head_dim), strides))
                        if span != n or c["numel"] != n:
                            raise RuntimeError(f"reference output: span {span}, numel {c['numel']}, expected {n}")
                        flat = self.wrap(self.ipc_opened[handle] + off, 2 * n).view(torch.bfloat16)
                        self.ref_flat[i] = flat
                        self.ref_out[i] = torch.as_strided(flat, (s.batch, s.heads, s.seqlen, s.head_dim), strides)
            except Exception as e:  # noqa: BLE001
                c["exception"] = f"{type(e).__name__}: {e}"
        rec["total_ms"] = (time.perf_counter() - t0) * 1e3
        print(f"[startup] ref {json.dumps(rec, default=str)[:1500]}", flush=True)

    def check_ref(self, i: int) -> dict:
        o, ref = self.ref_out[i], self.arenas[i]["ref"]
        t = o.transpose(1, 2)
        nan = int(t.numel() - self.torch.isfinite(t).sum().item())
        return {"nonfinite": nan, "max_abs_err_vs_worker_cudnn": float((t.float() - ref).abs().max().item())}

    def check_all(self, key: str) -> None:
        out = []
        for i, a in enumerate(self.arenas):
            rec = {"scenario": a["s"].name}
            try:
                self.poison(a)
                self.runner.serve(P.C_CALL, P.F_SYNC, i)
                rec["seed_runner"] = self.check(a)
                if i in self.ref_out:
                    self.ref_flat[i].fill_(float("nan"))
                    self.torch.cuda.synchronize()
                    self.ref.checked(P.C_CALL, flags=P.F_GRAPH | P.F_SYNC, arena=i)
                    rec["ref_runner"] = self.check_ref(i)
                    rec["ref_errs"] = self.ref.errs(2)
            except Exception as e:  # noqa: BLE001
                rec["exception"] = f"{type(e).__name__}: {e}"
            out.append(rec)
        self.results[key] = out
        print(f"[check] {key}: {json.dumps(out)}", flush=True)

    # -- gather ---------------------------------------------------------------------------------------------
    def make_gather(self, o_flat, seed: int):
        torch, stream = self.torch, self.stream
        g = torch.Generator(device="cuda")
        g.manual_seed(1000 + seed)
        idx = torch.randint(0, o_flat.numel(), (GATHER_N,), generator=g, device="cuda")
        buf = torch.empty(GATHER_N, dtype=o_flat.dtype, device="cuda")
        host = torch.empty(GATHER_N, dtype=o_flat.dtype, pin_memory=True)

        def gather():
            torch.index_select(o_flat, 0, idx, out=buf)
            host.copy_(buf, non_blocking=True)
            stream.synchronize()
        return gather, host

    def serve_then(self, r: P.Runner, command: int, flags: int, arena: int, after) -> tuple[float, float]:
        """probe.Runner.serve, with `after` run right after the stop inside the timed region: (stop ms, end ms)."""
        b = r.box
        ctypes.memset(ctypes.addressof(b) + P.Mailbox.rc.offset, 0, 2 * 4 * P.MAX_STEPS)
        b.command, b.flags, b.arena, b.arena2, b.extra = command, flags, arena, 0, 0
        r.seq += 1
        b.request = r.seq
        os.sched_setaffinity(r.pid, {r.cpu})
        signal.setitimer(signal.ITIMER_REAL, P.Runner.default_timeout)
        try:
            started = time.perf_counter()
            os.kill(r.pid, signal.SIGCONT)
            _, status = os.waitpid(r.pid, os.WUNTRACED)
            stopped = time.perf_counter()
            if os.WIFSTOPPED(status):
                after()
            ended = time.perf_counter()
        except TimeoutError:
            r.close()
            raise P.RunnerGone(f"request {command} got no stop within {P.Runner.default_timeout} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not os.WIFSTOPPED(status):
            r.alive = False
            raise P.RunnerGone(P._exit_text(status) + f" during command {command}")
        if int(b.reply) != r.seq:
            raise P.RunnerGone("stopped without replying")
        return (stopped - started) * 1e3, (ended - started) * 1e3

    # -- timing ---------------------------------------------------------------------------------------------
    def methods_for(self, i: int, m: dict, nan: dict) -> dict:
        a, r, q, clean = self.arenas[i], self.runner, self.ref, self.clean
        o_seed = a["t"]["o"]
        g_seed, h_seed = self.make_gather(o_seed.reshape(-1), i)
        have_ref_out = i in self.ref_out
        o_ref = self.ref_flat[i] if have_ref_out else o_seed
        g_ref, h_ref = self.make_gather(o_ref, 100 + i) if have_ref_out else (g_seed, h_seed)
        torch = self.torch

        def gathered(key, runner, command, flags, arena, gather, host, poison):
            def run():
                if poison is not None:
                    poison.fill_(float("nan"))
                self.flush_sync()
                stop, end = self.serve_then(runner, command, flags, arena, gather)
                bad = int(torch.isnan(host).sum())
                if bad:
                    nan[key] = nan.get(key, 0) + 1
                m.setdefault(key + "@stop", []).append(stop)
                return end
            return run

        def idle():
            self.flush_sync()
            t0 = time.perf_counter()
            g_seed()
            return (time.perf_counter() - t0) * 1e3

        methods = {
            "ev_seed": lambda: self.events_ms(self.seed(a)),
            "ev_cudnn": lambda: self.events_ms(self.cudnn(a)),
            "wr_seed": lambda: self.runner_ms(r, P.C_CALL, P.F_SYNC, i),
            "nr_kern": lambda: self.runner_ms(clean, P.C_PING, P.F_NULLK | P.F_SYNC),
            "nr_sync": lambda: self.runner_ms(clean, P.C_PING, P.F_SYNC),
            "gr_seed": gathered("gr_seed", r, P.C_CALL, P.F_SYNC, i, g_seed, h_seed, o_seed),
            "gn_kern": gathered("gn_kern", clean, P.C_PING, P.F_NULLK | P.F_SYNC, 0, g_seed, h_seed, None),
            "gw_idle": idle,
        }
        if i in self.cudnn_graphs:
            methods["ev_cudnn_graph"] = lambda: self.events_ms(self.cudnn_graphs[i])
        if i in self.runner_graphs:
            methods["wr_seed_graph"] = lambda: self.runner_ms(r, P.C_CALL, P.F_GRAPH | P.F_SYNC, i)
        if i in self.ref_ok:
            methods["wq_cudnn"] = lambda: self.runner_ms(q, P.C_CALL, P.F_GRAPH | P.F_SYNC, i)
            methods["nq_graph"] = lambda: self.runner_ms(q, P.C_PING, P.F_GRAPH | P.F_SYNC)
            methods["gq_cudnn"] = gathered("gq_cudnn", q, P.C_CALL, P.F_GRAPH | P.F_SYNC, i, g_ref, h_ref,
                                           o_ref if have_ref_out else None)
        return methods

    def part_timing2(self) -> None:
        torch = self.torch
        self.cudnn_graphs = {}
        for i, a in enumerate(self.arenas):
            try:
                self.cudnn_graphs[i] = self.graph_of(self.cudnn(a))
            except Exception as e:  # noqa: BLE001
                self.results["errors"].append(f"cudnn graph {a['s'].name}: {e}")
        passes, rounds = self.args.passes, self.args.rounds
        per_pass = -(-rounds // passes)
        rows = [{"scenario": a["s"].name, "samples_ms": {}, "nan_gathers": {}, "rounds": 0, "pass_rounds": [],
                 "pass_medians": []} for a in self.arenas]
        self.results["timing"] = rows
        methods = [self.methods_for(i, rows[i]["samples_ms"], rows[i]["nan_gathers"]) for i in range(len(self.arenas))]
        # warm every path (not recorded)
        for i in range(len(self.arenas)):
            scratch_m, scratch_n = {}, {}
            warm = self.methods_for(i, scratch_m, scratch_n)
            for _ in range(3):
                for f in warm.values():
                    f()
        torch.cuda.synchronize()
        print(f"[timing] warm; slack {self.slack} cycles; runner graphs {sorted(self.runner_graphs)}; "
              f"cudnn graphs {sorted(self.cudnn_graphs)}; ref ok {sorted(self.ref_ok)}; ref outs {sorted(self.ref_out)}",
              flush=True)
        rng = random.Random(11)
        slots = passes * len(self.arenas)
        gc.disable()
        try:
            for p in range(passes):
                for i, a in enumerate(self.arenas):
                    row = rows[i]
                    allowance = (self.deadline - time.time()) / max(1, slots)
                    slots -= 1
                    t_end = time.time() + allowance
                    m = row["samples_ms"]
                    names = list(methods[i])
                    before = {n: len(m.get(n, [])) for n in names}
                    done = 0
                    try:
                        for _ in range(per_pass):
                            rng.shuffle(names)
                            for n in names:
                                m.setdefault(n, []).append(methods[i][n]())
                            done += 1
                            if time.time() > t_end:
                                self.results["errors"].append(f"{a['s'].name} pass {p}: time allowance spent "
                                                              f"after {done} rounds")
                                break
                    except Exception:  # noqa: BLE001
                        self.results["errors"].append(f"timing {a['s'].name} pass {p}: {traceback.format_exc()}")
                        print(f"[timing] {a['s'].name} pass {p} FAILED: {traceback.format_exc()}", flush=True)
                    # equal sample counts per method (a failure mid-round leaves some one longer)
                    n_min = min(len(m.get(n, [])) for n in names)
                    for n in list(m):
                        del m[n][n_min:]
                    row["rounds"] += done
                    row["pass_rounds"].append(done)
                    pm = {n: med(m[n][before.get(n.split("@")[0], 0):]) for n in m
                          if len(m[n]) > before.get(n.split("@")[0], 0)}
                    row["pass_medians"].append(pm)
                    r = ratios(pm)
                    print(f"[timing] pass {p} {a['s'].name}: {done} rounds; "
                          + " ".join(f"{k}={r[k]:.4f}" for k in ("E", "S1", "S2", "S3", "S1r") if k in r), flush=True)
        finally:
            gc.enable()
        for row in rows:
            m = row["samples_ms"]
            row["median_ms"] = {n: med(v) for n, v in m.items()}
            row["p10_p90_ms"] = {n: (sorted(v)[len(v) // 10], sorted(v)[(9 * len(v)) // 10]) for n, v in m.items() if v}
            row["ratios"] = ratios(row["median_ms"])
            row["bootstrap90_vs_E"] = {k: bootstrap(m, k) for k in ("S1", "S2", "S3", "S1r")}
        keys = sorted({k for row in rows for k in row["ratios"]})
        self.results["geomeans"] = {k: geomean([row["ratios"].get(k) for row in rows]) for k in keys}
        self.results["geomeans_by_pass"] = [
            {k: geomean([ratios(row["pass_medians"][p]).get(k) for row in rows if len(row["pass_medians"]) > p])
             for k in ("E", "S1", "S2", "S3", "S1r")} for p in range(passes)]
        self.results["launch_slack_cycles"] = self.slack

    def close(self) -> None:
        for handle, base in getattr(self, "ipc_opened", {}).items():
            try:
                self.cudart.cudaIpcCloseMemHandle(ctypes.c_void_p(base))
            except Exception:  # noqa: BLE001
                pass
        for name in ("runner", "clean", "ref"):
            if getattr(self, name, None) is not None:
                getattr(self, name).close()


def summarize(res: dict) -> str:
    L = []
    d = res.get("device", {})
    L.append(f"device: {d.get('name')} torch {d.get('torch')} cuda {d.get('torch_cuda')} cudnn {d.get('cudnn')}")
    L.append(f"seed runner: {res.get('startup_seed', {}).get('filters')}; clean runner: "
             f"{res.get('startup_clean', {}).get('filters')}")
    sr = res.get("startup_ref", {})
    L.append(f"ref runner: spawn {sr.get('spawn_ms', 0):.1f} ms, init {sr.get('init_ms', 0):.0f} ms, fast path "
             f"(ctypes cudaGraphLaunch of the raw exec) {sr.get('fast_path')} {sr.get('fast_path_rc')} {sr.get('note')}; "
             f"open {sr.get('open_ms', 0):.1f} ms; captures {[(c.get('export_errs'), c.get('worker_open_err'), c.get('exception')) for c in sr.get('captures', [])]}")
    for key in ("check_before", "check_after"):
        for c in res.get(key, []):
            L.append(f"{key} {c['scenario']}: seed {c.get('seed_runner')} ref {c.get('ref_runner')} "
                     f"{c.get('exception', '')}")
    rows = res.get("timing", [])
    if rows:
        L.append(f"events slack {res.get('launch_slack_cycles')} cycles")
        L.append("medians ms: scenario rounds | ev_seed ev_cudnn ev_cudnn_graph | wr_seed wq_cudnn nr_kern nr_sync "
                 "nq_graph wr_seed_graph | gr_seed gq_cudnn gn_kern gw_idle | gather-stop: seed ref null")
        for row in rows:
            m = row.get("median_ms", {})
            g = lambda k: f"{m[k]:.4f}" if k in m else "-"  # noqa: E731
            L.append(f"  {row['scenario']} {row['rounds']} | {g('ev_seed')} {g('ev_cudnn')} {g('ev_cudnn_graph')} | "
                     f"{g('wr_seed')} {g('wq_cudnn')} {g('nr_kern')} {g('nr_sync')} {g('nq_graph')} "
                     f"{g('wr_seed_graph')} | {g('gr_seed')} {g('gq_cudnn')} {g('gn_kern')} {g('gw_idle')} | "
                     f"{(m.get('gr_seed', 0) - m.get('gr_seed@stop', 0)) * 1e3:.1f} "
                     f"{(m.get('gq_cudnn', 0) - m.get('gq_cudnn@stop', 0)) * 1e3:.1f} "
                     f"{(m.get('gn_kern', 0) - m.get('gn_kern@stop', 0)) * 1e3:.1f} us; NaN gathers {row['nan_gathers']}")
        L.append("ratio seed/cuDNN | " + " ".join(row["scenario"] for row in rows) + " | geomean | worst dev vs E")
        keys = list(res.get("geomeans", {}))
        order = ["E", "E_g", "S1", "S2", "S3", "S1r", "S1s", "S1g", "S3stop"]
        for k in order + [k for k in keys if k not in order]:
            if k not in res.get("geomeans", {}):
                continue
            vals = [row["ratios"].get(k) for row in rows]
            devs = [v / row["ratios"]["E"] - 1 for v, row in zip(vals, rows) if v and "E" in row["ratios"]]
            worst = max(devs, key=abs) if devs and k in order else None
            ge, gk = res["geomeans"].get("E"), res["geomeans"][k]
            L.append(f"  {k}: " + " ".join(f"{v:.4f}" if v else "-" for v in vals) + f" | {gk:.4f}"
                     + (f" ({(gk / ge - 1) * 100:+.2f}% vs E) | worst {worst * 100:+.2f}%" if worst is not None else ""))
        for row in rows:
            b = row.get("bootstrap90_vs_E", {})
            L.append(f"  bootstrap 90% of S/E-1 {row['scenario']}: " + " ".join(
                f"{k} {v[0] * 100:+.1f}..{v[1] * 100:+.1f}%" for k, v in b.items() if v))
        for p, gp in enumerate(res.get("geomeans_by_pass", [])):
            L.append(f"  pass {p} geomeans: " + " ".join(f"{k} {v:.4f}" for k, v in gp.items()))
    for err in res.get("errors", []):
        L.append(f"ERROR: {err[:500]}")
    return "\n".join(L)


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "--ref-runner":
        ref_runner_main(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--budget", type=float, default=280.0, help="seconds for the whole probe")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    probe = Probe2(args)
    probe.deadline = started + args.budget - 25  # the rounds end by then (checks and summary after)
    res = probe.results
    res["date_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    _bind_cudart(probe.cudart)

    def save():
        res["elapsed_s"] = time.time() - started
        with open(os.path.join(args.out, "probe2.json"), "w") as f:
            json.dump(res, f, indent=1, default=str)

    ok = True
    for name, fn in (("setup", lambda: (probe.setup(), probe.load_seed())), ("start", probe.start_all),
                     ("check_before", lambda: probe.check_all("check_before")), ("timing", probe.part_timing2),
                     ("check_after", lambda: probe.check_all("check_after"))):
        if not ok:
            break
        t0 = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001
            res["errors"].append(f"{name}: " + traceback.format_exc())
            print(f"[{name}] FAILED: {traceback.format_exc()}", flush=True)
            ok = name not in ("setup", "start")
        res.setdefault("part_seconds", {})[name] = time.time() - t0
        save()
    probe.close()
    save()
    try:
        text = summarize(res)
    except Exception:  # noqa: BLE001
        text = "summary failed: " + traceback.format_exc() + "\n" + json.dumps(
            {"geomeans": res.get("geomeans"), "ratios": [r.get("ratios") for r in res.get("timing", [])],
             "errors": res.get("errors")}, default=str)[:6000]
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    print("=" * 30 + " SUMMARY")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
