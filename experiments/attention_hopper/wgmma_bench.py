#!/usr/bin/env python3
"""Standalone check and timing of attention kernels (evk_attention.h ABI) on a GPU, through ctypes.

Builds each kernel with nvcc into a shared object (optionally with knob overrides), checks it
against an fp32 PyTorch reference on ragged / GQA / causal / decode / custom-scale shapes (output
poisoned with NaN before every call), and times it against cuDNN SDPA on FlashAttention-3's grid:
interleaved launches, the L2 flushed before each, CUDA events, median.

    python experiments/attention_hopper/wgmma_bench.py check evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu
    python experiments/attention_hopper/wgmma_bench.py time evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu \
        evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu --rounds 15
    ... --set NAME=VALUE,NAME=VALUE   (knob overrides, applied to the first kernel)
    ... --set "A=1;A=2,B=3"           (several variants of the first kernel, built in parallel,
                                        checked one after the other or timed in the same rounds)
    ... --knob-values                  (the variants that give every knob each of its values)
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
HEADER_DIRS = [ROOT / "evokernel/builtin_tasks/attention_fwd", ROOT / "evokernel/harness/tasks/attention_fwd"]


class Params(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("causal", ctypes.c_int), ("softmax_scale", ctypes.c_float)]


def apply_knobs(source: str, overrides: dict[str, str]) -> str:
    for name, value in overrides.items():
        source, n = re.subn(rf"^#define {name} \S+", f"#define {name} {value}", source, flags=re.M)
        if n != 1:
            raise SystemExit(f"knob {name} not found")
    return source


def build(path: Path, overrides: dict[str, str], workdir: Path, extra: list[str] | None = None) -> ctypes.CDLL:
    source = apply_knobs(path.read_text(), overrides)
    key = hashlib.sha256((source + str(extra)).encode()).hexdigest()[:12]
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / f"{path.stem}-{key}.cu"
    so = workdir / f"{path.stem}-{key}.so"
    src.write_text(source)
    header = next(d for d in HEADER_DIRS if (d / "evk_attention.h").exists())
    cmd = ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-Xcompiler", "-fPIC",
           "-Xptxas", "-v", f"-I{header}", str(src), "-o", str(so)] + (extra or [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    log = run.stdout + run.stderr
    (workdir / f"{path.stem}-{key}.log").write_text(" ".join(cmd) + "\n" + log)
    if run.returncode != 0:
        print(log[-3000:])
        raise SystemExit(f"build failed: {path}")
    spills = [line.strip() for line in log.splitlines() if "spill" in line and " 0 bytes spill stores" not in line]
    regs = sorted({int(m) for m in re.findall(r"Used (\d+) registers", log)})
    print(f"built {path.name} {overrides or ''}: registers {regs}, spills: {spills or 'none'}", flush=True)
    lib = ctypes.CDLL(str(so))
    lib.evk_attention_fwd.argtypes = [ctypes.POINTER(Params), ctypes.c_void_p]
    lib.evk_attention_fwd.restype = ctypes.c_int
    return lib


def knob_value_sets(source: str) -> list[dict[str, str]]:
    """Override sets that together give every `// @knob` its every value (set i takes value i mod n)."""
    knobs = {m[1]: m[3].split(",") for m in re.finditer(r"^#define (\w+) (\S+)\s*// @knob (\S+)", source, flags=re.M)}
    count = max(len(v) for v in knobs.values())
    return [{name: values[i % len(values)] for name, values in knobs.items()} for i in range(count)]


def call(lib, q, k, v, o, causal, scale) -> int:
    b, sq, hq, d = q.shape
    p = Params(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), b, hq, k.shape[2], sq, k.shape[1], d,
               int(causal), scale)
    return lib.evk_attention_fwd(ctypes.byref(p), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))


def reference(q, k, v, causal, scale):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    out = torch.empty(b, sq, hq, d, dtype=torch.float32, device=q.device)
    rows = torch.arange(sq, device=q.device)[:, None]
    cols = torch.arange(sk, device=q.device)[None, :]
    masked = cols > rows + (sk - sq)
    for h in range(hq):  # one head at a time keeps the scores small
        kh = h // (hq // hkv)
        s = torch.einsum("bqd,bkd->bqk", q[:, :, h].float(), k[:, :, kh].float()) * scale
        if causal:
            s = s.masked_fill(masked, float("-inf"))
        pr = torch.softmax(s, dim=-1).nan_to_num(0.0)
        out[:, :, h] = torch.einsum("bqk,bkd->bqd", pr, v[:, :, kh].float())
    return out


CHECK_SHAPES = [  # batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale (None: 1/sqrt(d))
    (2, 4, 4, 256, 256, 64, False, None), (1, 8, 2, 300, 300, 128, True, None), (2, 2, 1, 77, 190, 256, True, None),
    (1, 4, 4, 1, 513, 128, False, 0.3), (1, 2, 2, 200, 130, 64, True, None),
    (4, 16, 4, 2048, 2048, 128, False, None), (4, 16, 2, 2048, 2048, 128, True, None),
    (4, 32, 8, 2048, 2048, 64, True, None), (2, 8, 2, 2048, 2048, 256, True, None), (2, 8, 1, 2048, 2048, 256, False, None),
    (2, 16, 16, 1000, 1531, 128, True, None), (2, 16, 16, 1531, 1000, 128, True, None), (3, 16, 4, 1, 4097, 128, False, None),
    (5, 32, 32, 77, 77, 64, True, 0.5), (2, 8, 2, 333, 2049, 256, True, None), (1, 32, 8, 4097, 4097, 64, False, 0.05),
    (2, 8, 8, 2049, 191, 256, False, None), (1, 4, 4, 200, 300, 128, False, -0.1), (1, 4, 2, 300, 100, 128, True, None),
    (1, 2, 2, 65, 65, 64, True, None), (1, 2, 2, 64, 1, 256, False, None), (2, 4, 4, 130, 4000, 64, True, 2.0),
    # decode-like: one or a few query rows, long keys (the fallback's key split)
    (2, 8, 8, 1, 8192, 256, False, None), (4, 16, 16, 1, 2000, 64, False, None), (1, 8, 2, 16, 4096, 128, True, None),
    (2, 4, 1, 3, 70, 128, True, None), (1, 2, 2, 120, 200, 64, True, None), (1, 4, 4, 40, 30, 128, True, None),
]


def check(lib, shapes, seed=0) -> bool:
    ok_all = True
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for b, hq, hkv, sq, sk, d, causal, scale in shapes:
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        q = torch.randn(b, sq, hq, d, device="cuda", generator=gen).bfloat16()
        k = torch.randn(b, sk, hkv, d, device="cuda", generator=gen).bfloat16()
        v = torch.randn(b, sk, hkv, d, device="cuda", generator=gen).bfloat16()
        inputs = [x.clone() for x in (q, k, v)]
        o = torch.full((b, sq, hq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        rc = call(lib, q, k, v, o, causal, scale)
        torch.cuda.synchronize()
        ref = reference(q, k, v, causal, scale)
        of = o.float()
        err = (of - ref).abs().max().item() if of.numel() else 0.0
        rel = ((of - ref).norm() / ref.norm().clamp_min(1e-6)).item() if of.numel() else 0.0
        tol = 2e-2 * max(1.0, ref.abs().max().item())
        finite = bool(torch.isfinite(of).all())
        same_inputs = all(torch.equal(a, x) for a, x in zip(inputs, (q, k, v)))
        ok = rc == 0 and finite and err <= tol and rel <= 1e-2 and same_inputs
        ok_all &= ok
        print(f"{'ok ' if ok else 'BAD'} b{b} h{hq}/{hkv} q{sq} k{sk} d{d} {'causal' if causal else 'full  '} "
              f"scale {scale:.3g}: rc {rc} finite {finite} max err {err:.2e} (tol {tol:.1e}) rel {rel:.1e}", flush=True)
    return ok_all


FA3_GRID = [(16 * 1024 // s, 2048 // d, 2048 // d, s, s, d, causal) for d in (64, 128, 256)
            for causal in (False, True) for s in (1024, 2048, 4096, 8192, 16384)]
DECODE_GRID = [(1, 4, 4, 1, 513, 128, False), (3, 16, 16, 1, 4097, 128, False), (8, 32, 32, 1, 8192, 128, False),
               (16, 32, 32, 1, 2048, 64, False), (4, 8, 8, 1, 16384, 256, False), (2, 16, 16, 16, 8192, 128, True)]


def time_grid(libs: dict, rounds: int, grid) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    rows = []
    for b, h, hkv, sq, s, d, causal in grid:
        q = torch.randn(b, sq, h, d, device="cuda").bfloat16()
        k, v = (torch.randn(b, s, hkv, d, device="cuda").bfloat16() for _ in range(2))
        o = torch.empty_like(q)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA wants [B, H, S, D]; strided views
        scale = 1.0 / math.sqrt(d)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal and sq == s, scale=scale)

        impls = {"cudnn": cudnn}
        for name, lib in libs.items():
            impls[name] = (lambda lib=lib: call(lib, q, k, v, o, causal, scale))
        for f in impls.values():  # warm-up
            f()
        torch.cuda.synchronize()
        times = {n: [] for n in impls}
        for _ in range(rounds):
            for n, f in impls.items():
                flush.zero_()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                f()
                e1.record()
                e1.synchronize()
                times[n].append(e0.elapsed_time(e1))
        # SDPA's causal mask is top-left aligned: the decode grid's causal row has sq != sk, so cuDNN
        # runs it without a mask there (a bound on the masked work, noted in RESULTS)
        flops = 4.0 * b * h * sq * s * d * (0.5 if causal and sq == s else 1.0)
        shape = f"s{s}" if sq == s else f"q{sq}k{s}"
        row = {"name": f"d{d}-b{b}-h{h}-{shape}{'-causal' if causal else ''}", "d": d, "causal": causal}
        for n, ts in times.items():
            med = statistics.median(ts)
            row[n] = flops / (med * 1e-3) / 1e12
            row[n + "_spread"] = (statistics.quantiles(ts, n=4)[2] - statistics.quantiles(ts, n=4)[0]) / med
        rows.append(row)
        print(row["name"], " ".join(f"{n} {row[n]:.0f}" for n in impls), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check", "time"])
    ap.add_argument("kernels", nargs="+", type=Path)
    ap.add_argument("--set", default="", help="knob overrides for the first kernel: NAME=V,NAME=V")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evk_bench"))
    ap.add_argument("--grid", default="fa3", choices=["fa3", "fa3-2k", "decode"])
    ap.add_argument("--knob-values", action="store_true", help="variants giving every knob each of its values")
    ap.add_argument("--sub", default="", help="source substitutions for the first kernel: OLD@@NEW")
    args = ap.parse_args()
    sets = [dict(kv.split("=") for kv in group.split(",") if kv) for group in args.set.split(";")]
    first = args.kernels[0]
    if args.sub:
        old, new = args.sub.split("@@")
        text = first.read_text()
        assert old in text, "substitution target not found"
        args.workdir.mkdir(parents=True, exist_ok=True)
        first = args.workdir / ("sub-" + first.name)
        first.write_text(text.replace(old, new))
    if args.knob_values:
        sets = knob_value_sets(first.read_text())
    jobs = [(f"v{i}" if len(sets) > 1 else first.stem, first, o) for i, o in enumerate(sets)]
    jobs += [(path.stem, path, {}) for path in args.kernels[1:]]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(lambda job: build(job[1], job[2], args.workdir), jobs))
    libs = {name: lib for (name, _, _), lib in zip(jobs, built)}
    for (name, _, o) in jobs:
        print(f"{name}: {o}")
    if args.mode == "check":
        ok = True
        for (name, _, o) in jobs[:len(sets)]:
            print(f"--- {name} {o}")
            ok &= check(libs[name], CHECK_SHAPES)
        print("CHECK", "PASS" if ok else "FAIL", args.set)
        return 0 if ok else 1
    grid = {"fa3": FA3_GRID, "fa3-2k": [g for g in FA3_GRID if g[4] == 2048], "decode": DECODE_GRID}[args.grid]
    rows = time_grid(libs, args.rounds, grid)
    names = list(libs)
    print("\n| scenario | " + " | ".join(f"{n} TFLOP/s" for n in names) + " | cuDNN TFLOP/s | "
          + " | ".join(f"{n}/cuDNN" for n in names) + " | spread |")
    print("|---|" + "---|" * (2 * len(names) + 2))
    for r in rows:
        print(f"| {r['name']} | " + " | ".join(f"{r[n]:.0f}" for n in names) + f" | {r['cudnn']:.0f} | "
              + " | ".join(f"{r[n] / r['cudnn']:.3f}" for n in names)
              + f" | {max(r[n + '_spread'] for n in names + ['cudnn']):.1%} |")
    for n in names:
        ratios = [r[n] / r["cudnn"] for r in rows]
        by = {}
        for r in rows:
            by.setdefault((r["d"], r["causal"]), []).append(r[n] / r["cudnn"])
        parts = ", ".join(f"d{d}{' causal' if c else ''} {math.exp(statistics.fmean(map(math.log, v))):.3f}"
                          for (d, c), v in by.items())
        print(f"{n}: geomean vs cuDNN {math.exp(statistics.fmean(map(math.log, ratios))):.3f}, min {min(ratios):.3f}; {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
