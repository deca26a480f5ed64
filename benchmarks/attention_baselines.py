#!/usr/bin/env python3
"""Attention-fwd baselines: evokernel kernels (.cu, ABI evk_attention.h) against torch SDPA.

Builds each --kernel with nvcc into a temp dir, loads it with ctypes, checks it against an fp32
reference (ragged / GQA / causal set and the timed scenarios), then times every kernel plus
torch SDPA (cuDNN and flash backends) on FA3's benchmark grid in one process: CUDA events around
each launch, a 256 MB L2 flush before each launch, backends interleaved per round, median.

  python3 benchmarks/attention_baselines.py [--kernel K.cu ...] [--rounds 25] [--out table.md]
"""
import argparse
import concurrent.futures as cf
import ctypes
import math
import os
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INC = os.path.join(REPO, "evokernel", "harness", "tasks", "attention_fwd")
DEFAULT_KERNELS = [
    os.path.join(REPO, "evokernel", "defaults", "attention_fa2.cu"),
    os.path.join(INC, "original.cu"),
]
NVCC_FLAGS = ["-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared",
              "-Xcompiler", "-fPIC"]


class Params(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("batch", ctypes.c_int), ("heads_q", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("seqlen_q", ctypes.c_int),
                ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("causal", ctypes.c_int), ("softmax_scale", ctypes.c_float)]


def build(cu, outdir):
    """Compile one .cu to a .so; returns (path, ptxas report). Uses the harness build module
    (content-hash cache) when it is importable, else a local nvcc call."""
    try:
        sys.path.insert(0, REPO)
        from pathlib import Path
        from evokernel.harness.build import build as harness_build
    except ImportError:
        harness_build = None
    if harness_build is not None:
        r = harness_build(open(cu).read(), "cuda", Path(INC) / "evk_attention.h")
        if not r.ok:
            raise RuntimeError("build failed for %s:\n%s" % (cu, r.log[-4000:]))
        return str(r.library), r.log
    so = os.path.join(outdir, "%s_%d.so" % (os.path.splitext(os.path.basename(cu))[0],
                                              abs(hash(os.path.abspath(cu))) % 10**8))
    cmd = ["nvcc", *NVCC_FLAGS, "-Xptxas", "-v", "-I", INC, "-o", so, cu]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("nvcc failed for %s:\n%s" % (cu, r.stderr[-4000:]))
    return so, r.stderr


class Kernel:
    def __init__(self, name, so):
        self.name = name
        self.lib = ctypes.CDLL(so)
        self.fn = self.lib.evk_attention_fwd
        self.fn.argtypes = [ctypes.POINTER(Params), ctypes.c_void_p]
        self.fn.restype = ctypes.c_int

    def __call__(self, q, k, v, o, causal, scale):
        B, Sq, Hq, D = q.shape
        _, Sk, Hkv, _ = k.shape
        p = Params(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), B, Hq, Hkv, Sq, Sk,
                   D, int(causal), float(scale))
        rc = self.fn(ctypes.byref(p), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc != 0:
            raise RuntimeError("%s returned %d" % (self.name, rc))


def reference(q, k, v, causal, scale, max_elems=1 << 28):
    """fp32 reference, [B,S,H,D] layout, bottom-right causal, empty rows -> 0; chunked over heads."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    grp = Hq // Hkv
    out = torch.empty(B, Sq, Hq, D, dtype=torch.float32, device=q.device)
    hc = max(1, min(Hq, max_elems // max(1, Sq * Sk)))
    if causal:
        i = torch.arange(Sq, device=q.device)[:, None]
        j = torch.arange(Sk, device=q.device)[None, :]
        mask = j > i + (Sk - Sq)
    for b in range(B):
        for h0 in range(0, Hq, hc):
            h1 = min(Hq, h0 + hc)
            hs = torch.arange(h0, h1, device=q.device)
            qq = q[b, :, h0:h1].float().transpose(0, 1)               # [h, Sq, D]
            kk = k[b][:, hs // grp].float().transpose(0, 1)          # [h, Sk, D]
            vv = v[b][:, hs // grp].float().transpose(0, 1)
            s = torch.matmul(qq, kk.transpose(1, 2)) * scale
            if causal:
                s.masked_fill_(mask, float("-inf"))
            pm = torch.softmax(s, dim=-1)
            pm = torch.nan_to_num(pm, nan=0.0)
            out[b, :, h0:h1] = torch.matmul(pm, vv).transpose(0, 1)
            del s, pm
    return out


def check(kern, B, Hq, Hkv, Sq, Sk, D, causal, scale, gen_seed):
    g = torch.Generator(device="cuda").manual_seed(gen_seed)
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Sk, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Sk, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
    o = torch.full((B, Sq, Hq, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern(q, k, v, o, causal, scale)
    torch.cuda.synchronize()
    ref = reference(q, k, v, causal, scale)
    of = o.float()
    if not torch.isfinite(of).all():
        return float("inf")
    den = ref.norm().item()
    num = (of - ref).norm().item()
    return num / den if den > 0 else num


RAGGED = [  # (B, Hq, Hkv, Sq, Sk, scale or None for 1/sqrt(D))
    (2, 8, 2, 77, 1000, None),
    (1, 4, 4, 1, 1531, None),
    (2, 4, 1, 1531, 77, 0.3),      # causal: many rows see no key
    (1, 6, 3, 1000, 1000, 1.7),
    (3, 2, 2, 129, 1531, None),
    (1, 8, 8, 1531, 1000, -0.25),  # negative scale
    (2, 4, 2, 64, 64, None),
    (1, 2, 1, 1000, 1, None),
]

GRID = [(16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)]


def flops(B, H, Sq, Sk, D, causal):
    f = 4.0 * B * H * Sq * Sk * D
    return f / 2 if (causal and Sq == Sk) else f


def time_scenario(backends, B, H, S, D, causal, rounds, flush):
    scale = 1.0 / math.sqrt(D)
    q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    calls = {}
    for name, kind, obj in backends:
        if kind == "evk":
            calls[name] = (lambda kern=obj: kern(q, k, v, o, causal, scale))
        else:
            def sdpa(backend=obj):
                with torch.nn.attention.sdpa_kernel(backend):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
            calls[name] = sdpa
    ok = {}
    for name, fn in calls.items():  # warm-up; drop backends that refuse the shape
        try:
            fn(); fn()
            torch.cuda.synchronize()
            ok[name] = fn
        except Exception as e:  # noqa: BLE001
            print("  %s: failed (%s)" % (name, str(e).splitlines()[0][:120]), flush=True)
    times = {n: [] for n in ok}
    for _ in range(rounds):
        evs = []
        for name, fn in ok.items():
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record()
            evs.append((name, s, e))
        torch.cuda.synchronize()
        for name, s, e in evs:
            times[name].append(s.elapsed_time(e))
    fl = flops(B, H, S, S, D, causal)
    return {n: (statistics.median(t), fl / (statistics.median(t) * 1e-3) / 1e12)
            for n, t in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", action="append", help="kernel .cu (repeatable)")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--out", help="write the table as markdown")
    ap.add_argument("--hd", type=int, action="append", help="restrict head dims")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--no-sdpa", action="store_true", help="time only the kernels")
    ap.add_argument("--grid-check", action="store_true",
                    help="also check the first kernel on the timed scenarios")
    args = ap.parse_args()
    kernels = args.kernel or [k for k in DEFAULT_KERNELS if os.path.exists(k)]
    hds = args.hd or [64, 128, 256]

    tmp = tempfile.mkdtemp(prefix="evk_attn_")
    names, built = [], {}
    with cf.ThreadPoolExecutor(max_workers=min(16, len(kernels))) as ex:
        futs = {ex.submit(build, k, tmp): k for k in kernels}
        for f in cf.as_completed(futs):
            k = futs[f]
            try:
                built[k] = f.result()
            except Exception as e:  # noqa: BLE001
                print("BUILD FAILED %s\n%s" % (k, e), flush=True)
    evk = []
    for k in kernels:
        if k not in built:
            continue
        base = os.path.splitext(os.path.basename(k))[0]
        name = base if base not in names else "%s/%s" % (os.path.basename(os.path.dirname(k)), base)
        names.append(name)
        so, rep = built[k]
        regs = [l.strip() for l in rep.splitlines() if "registers" in l or "spill" in l]
        print("built %s: %s" % (name, " | ".join(regs)), flush=True)
        evk.append(Kernel(name, so))

    dev = torch.cuda.get_device_properties(0)
    print("device: %s, %d SMs, torch %s" % (dev.name, dev.multi_processor_count, torch.__version__))

    bad = []
    if not args.no_check:
        print("\ncorrectness (rel. L2 error vs fp32 reference; pass < 1e-2)", flush=True)
        seed = 1234
        for kern in evk:
            worst, fails = 0.0, []
            for D in hds:
                for causal in (0, 1):
                    for (B, Hq, Hkv, Sq, Sk, sc) in RAGGED:
                        scale = sc if sc is not None else 1.0 / math.sqrt(D)
                        seed += 1
                        try:
                            err = check(kern, B, Hq, Hkv, Sq, Sk, D, causal, scale, seed)
                        except Exception as e:  # noqa: BLE001
                            err = float("inf")
                            print("  %s error: %s" % (kern.name, e))
                        worst = max(worst, err)
                        if not err < 1e-2:
                            fails.append((D, causal, B, Hq, Hkv, Sq, Sk, scale, err))
            print("  %-28s ragged/GQA/causal set: %s (worst %.2e, %d cases)" % (
                kern.name, "PASS" if not fails else "FAIL", worst, len(hds) * 2 * len(RAGGED)))
            for f in fails[:20]:
                print("    FAIL hd=%d causal=%d B=%d Hq=%d Hkv=%d Sq=%d Sk=%d scale=%g err=%.3e" % f)
            if fails:
                bad.append(kern.name)
        if args.grid_check:  # first kernel only (the reference is recomputed per check)
            for kern in evk[:1]:
                worst, nf = 0.0, 0
                for D in hds:
                    for causal in (0, 1):
                        for (B, S) in GRID:
                            seed += 1
                            err = check(kern, B, 2048 // D, 2048 // D, S, S, D, causal,
                                        1.0 / math.sqrt(D), seed)
                            worst = max(worst, err)
                            if not err < 1e-2:
                                nf += 1
                                print("    FAIL grid hd=%d causal=%d B=%d S=%d err=%.3e" % (
                                    D, causal, B, S, err))
                print("  %-28s grid scenarios: %s (worst %.2e)" % (
                    kern.name, "PASS" if nf == 0 else "FAIL", worst), flush=True)
                if nf:
                    bad.append(kern.name)
        torch.cuda.empty_cache()

    if args.no_time:
        return 1 if bad else 0
    backends = [(k.name, "evk", k) for k in evk]
    if not args.no_sdpa:
        from torch.nn.attention import SDPBackend
        backends += [("sdpa-cudnn", "sdpa", SDPBackend.CUDNN_ATTENTION),
                     ("sdpa-flash", "sdpa", SDPBackend.FLASH_ATTENTION)]
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    rows = []
    print("\ntiming: median of %d interleaved rounds, L2 flushed before each launch" % args.rounds,
          flush=True)
    for D in hds:
        for causal in (False, True):
            for (B, S) in GRID:
                H = 2048 // D
                res = time_scenario(backends, B, H, S, D, causal, args.rounds, flush)
                rows.append(((D, causal, B, S), res))
                print("  hd%d %s B=%d S=%d: %s" % (
                    D, "causal" if causal else "full", B, S,
                    "  ".join("%s %.1f" % (n, r[1]) for n, r in res.items())), flush=True)
                torch.cuda.empty_cache()

    names_all = [b[0] for b in backends]
    hdr = ["scenario"] + names_all
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for (D, causal, B, S), res in rows:
        cells = ["hd%d %s B%d S%d" % (D, "causal" if causal else "full", B, S)]
        cells += ["%.1f" % res[n][1] if n in res else "-" for n in names_all]
        lines.append("| " + " | ".join(cells) + " |")
    geo = []
    for n in names_all:
        r = [math.log(res[n][1] / res["sdpa-cudnn"][1]) for _, res in rows
             if n in res and "sdpa-cudnn" in res]
        geo.append("%.3f" % math.exp(sum(r) / len(r)) if r else "-")
    lines.append("| **geomean vs cuDNN** | " + " | ".join(geo) + " |")
    print("\nTFLOP/s (FLOPs = 4*B*H*S*S*D, halved for causal)")
    print("\n".join(lines))
    if bad:
        print("\nFAILED correctness: %s" % ", ".join(bad))
    if args.out:
        with open(args.out, "w") as f:
            f.write("# attention-fwd baselines (%s)\n\n" % dev.name)
            f.write("TFLOP/s, median of %d rounds, L2 flushed per launch.\n\n" % args.rounds)
            f.write("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
