#!/usr/bin/env python3
"""What cuDNN's first call of a shape costs in a fresh process: SDPA forced to cuDNN on the six `fa3-2k`
shapes (head dims 64/128/256, causal or not, batch 8, 2048 tokens), each called twice. Prints one JSON line:
torch import and context seconds, first and second call per shape, and the libraries the calls loaded (the
driver's PTX JIT compiler among them when code was compiled from PTX). PRELOAD=1 loads cuDNN's libraries
first. Run by `cudnn_jit_cache.sh` under different cache settings (RESULTS.md, entry "cuDNN's JIT-compiled
kernels kept across workers").
"""
import ctypes, json, os, sys, time
t0 = time.perf_counter()
preload = os.environ.get("PRELOAD")
import torch
t_import = time.perf_counter() - t0
def maps():
    return {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}
pre = {}
if preload:
    import glob
    cands = sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "**", "libcudnn*.so*"), recursive=True))
    for path in cands:
        s = time.perf_counter()
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            pre[os.path.basename(path)] = round(time.perf_counter() - s, 3)
        except OSError as e:
            pre[os.path.basename(path)] = str(e)[:80]
before = maps()
s = time.perf_counter(); torch.zeros(1, device="cuda"); torch.cuda.synchronize(); t_ctx = time.perf_counter() - s
after_ctx = maps()
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
rows = []
for d in (64, 128, 256):
    for causal in (False, True):
        h = 2048 // d
        q, k, v = (torch.randn(8, h, 2048, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            s = time.perf_counter(); F.scaled_dot_product_attention(q, k, v, is_causal=causal); torch.cuda.synchronize(); first = time.perf_counter() - s
            s = time.perf_counter(); F.scaled_dot_product_attention(q, k, v, is_causal=causal); torch.cuda.synchronize(); second = time.perf_counter() - s
        rows.append((d, causal, round(first, 3), round(second, 4)))
new = sorted(os.path.basename(p) for p in maps() - after_ctx)
print(json.dumps({"label": sys.argv[1], "import": round(t_import, 2), "ctx": round(t_ctx, 2), "preload": pre,
                  "first_calls": rows, "sum_first": round(sum(r[2] for r in rows), 2),
                  "libs_loaded_by_sdpa": new, "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__}))
