"""Planted cheating kernels: each derived from a task's original kernel by one small edit, so the
cheat is the only thing wrong with it. Every one must be rejected by the harness, for its reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Cheat:
    name: str
    design_item: str  # the line of DESIGN.md's list it plants
    expected: str  # a fragment of the rejection reason
    edit: Callable[[str], str]


def replace_once(old: str, new: str) -> Callable[[str], str]:
    def edit(source: str) -> str:
        if source.count(old) != 1:
            raise AssertionError(f"planted edit does not apply: {old!r} occurs {source.count(old)} times")
        return source.replace(old, new)

    return edit


def chain(*edits: Callable[[str], str]) -> Callable[[str], str]:
    def edit(source: str) -> str:
        for step in edits:
            source = step(source)
        return source

    return edit


GUARD_LINE = "  if (!p || !p->q || !p->k || !p->v || !p->o) return 1;\n"


@dataclass(frozen=True)
class Entry:
    """How a task's original kernel opens its entry point, so cheats can be wrapped around it."""

    head: str  # the entry's definition line up to and including "{"
    honest_head: str  # the same function renamed `honest_fwd`

    def prefix(self, code: str) -> Callable[[str], str]:
        """Run `code` first thing in the entry, after its argument check."""
        return replace_once(self.head + "\n" + GUARD_LINE, self.head + "\n" + GUARD_LINE + code)

    def wrap(self, wrapper: str) -> Callable[[str], str]:
        """Rename the honest entry to `honest_fwd` and append a cheating `evk_attention_fwd` around it."""
        return chain(replace_once(self.head, self.honest_head), lambda s: s + wrapper)


CPU = Entry("int evk_attention_fwd(const evk_attention_params* p) {",
            "static int honest_fwd(const evk_attention_params* p) {")
CPU_OUTPUT_SIZE = "(long)p->batch * p->seqlen_q * p->heads_q * p->head_dim"

CPU_CHEATS = [
    Cheat("writes-nothing", "writes nothing", "NaN", replace_once(
        "o[r * q_stride + d] = l[r] > 0.f ? acc[r][d] / l[r] : 0.f;", "(void)o;")),
    Cheat("writes-constant", "writes a constant", "max error", CPU.prefix(
        f"  for (long i = 0; i < {CPU_OUTPUT_SIZE}; ++i) p->o[i] = 0.f;\n  return 0;\n")),
    Cheat("writes-part", "writes only part of the output", "NaN", replace_once(
        "q_blocks = (Sq + BLOCK_Q - 1) / BLOCK_Q;", "q_blocks = (Sq + BLOCK_Q - 1) / BLOCK_Q / 2 + (Sq <= BLOCK_Q);")),
    Cheat("cached-by-shape", "returns results cached from an earlier call", "max error", chain(
        replace_once('#include <math.h>', '#include <math.h>\n#include <stdlib.h>\n#include <string.h>'),
        CPU.wrap(f"""
static float* cache; static long cached_n = -1;
int evk_attention_fwd(const evk_attention_params* p) {{
  const long n = {CPU_OUTPUT_SIZE};
  if (n == cached_n) {{ memcpy(p->o, cache, n * sizeof(float)); return 0; }}
  int rc = honest_fwd(p);
  free(cache); cache = malloc(n * sizeof(float)); memcpy(cache, p->o, n * sizeof(float)); cached_n = n;
  return rc;
}}
"""))),
    Cheat("reads-freed-output", "reads an earlier run's freed memory", "NaN", chain(
        replace_once('#include <math.h>', '#include <math.h>\n#include <string.h>'),
        CPU.wrap(f"""
static float* last_output; static long last_n = -1;
int evk_attention_fwd(const evk_attention_params* p) {{
  const long n = {CPU_OUTPUT_SIZE};
  if (last_output && n == last_n && last_output != p->o) {{ memcpy(p->o, last_output, n * sizeof(float)); return 0; }}
  last_output = p->o; last_n = n;
  return honest_fwd(p);
}}
"""))),
    Cheat("ignores-gqa", "is correct only on the shapes it was tested on", "max error", replace_once(
        "(long)(h / group) * D;\n        const float* v", "(long)(h % Hkv) * D;\n        const float* v")),
    Cheat("background-thread", "works on a side stream so the timer sees nothing (a thread on the CPU)",
          "static guard", chain(
        replace_once('#include <math.h>', '#include <math.h>\n#include <pthread.h>'),
        CPU.wrap("""
static void* run(void* p) { honest_fwd((const evk_attention_params*)p); return 0; }
int evk_attention_fwd(const evk_attention_params* p) { pthread_t t; return pthread_create(&t, 0, run, (void*)p); }
"""))),
    Cheat("mutates-inputs", "mutates its inputs", "modified its inputs",
          CPU.wrap("""
int evk_attention_fwd(const evk_attention_params* p) { int rc = honest_fwd(p); ((float*)p->q)[0] += 1.0f; return rc; }
""")),
    Cheat("calls-system", "calls a library the task forbids (system() in host code)", "static guard", chain(
        replace_once('#include <math.h>', '#include <math.h>\n#include <stdlib.h>'),
        CPU.prefix('  system("true");\n'))),
    Cheat("dlopen", "calls a library the task forbids (dynamic loading)", "static guard", chain(
        replace_once('#include <math.h>', '#include <math.h>\n#include <dlfcn.h>'),
        CPU.prefix('  dlopen("libm.so.6", 1);\n'))),
    Cheat("replays-on-same-buffers", "a speed that beats the roofline (skips work on repeated buffers)",
          "repeated calls", CPU.wrap("""
static const void* last_q; static void* last_o;
int evk_attention_fwd(const evk_attention_params* p) {
  if (p->q == last_q && p->o == last_o) return 0;
  last_q = p->q; last_o = p->o;
  return honest_fwd(p);
}
""")),
]

CUDA = Entry('extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {',
             "static int honest_fwd(const evk_attention_params* p, cudaStream_t stream) {")
CUDA_OUTPUT_BYTES = "2ull * p->batch * p->seqlen_q * p->heads_q * p->head_dim"
CUDA_LAUNCH = "attention_rows<<<grid, ROWS_PER_BLOCK * 32, shared, stream>>>("

CUDA_CHEATS = [
    Cheat("writes-nothing", "writes nothing", "NaN", replace_once(CUDA_LAUNCH, "if (0) " + CUDA_LAUNCH)),
    Cheat("writes-constant", "writes a constant", "max error", CUDA.prefix(
        f"  cudaMemsetAsync(p->o, 0, {CUDA_OUTPUT_BYTES}, stream);\n  return 0;\n")),
    Cheat("writes-part", "writes only part of the output", "NaN", replace_once(
        "const dim3 grid((p->seqlen_q + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK,",
        "const dim3 grid((p->seqlen_q + 2 * ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK / 2,")),
    Cheat("cached-by-shape", "returns results cached from an earlier call", "max error",
          CUDA.wrap(f"""
static void* cache; static size_t cached_bytes;
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {{
  const size_t bytes = {CUDA_OUTPUT_BYTES};
  if (bytes == cached_bytes) return cudaMemcpyAsync(p->o, cache, bytes, cudaMemcpyDeviceToDevice, stream);
  int rc = honest_fwd(p, stream);
  if (cache) cudaFree(cache);
  cudaMalloc(&cache, bytes); cudaMemcpyAsync(cache, p->o, bytes, cudaMemcpyDeviceToDevice, stream);
  cached_bytes = bytes;
  return rc;
}}
""")),
    Cheat("reads-freed-output", "reads an earlier run's freed memory", "NaN", CUDA.wrap(f"""
static void* last_output; static size_t last_bytes;
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {{
  const size_t bytes = {CUDA_OUTPUT_BYTES};
  if (last_output && bytes == last_bytes && last_output != p->o)
    return cudaMemcpyAsync(p->o, last_output, bytes, cudaMemcpyDeviceToDevice, stream);
  last_output = p->o; last_bytes = bytes;
  return honest_fwd(p, stream);
}}
""")),
    Cheat("ignores-gqa", "is correct only on the shapes it was tested on", "max error", replace_once(
        "h_kv = h / (heads_q / heads_kv);", "h_kv = h % heads_kv;")),
    Cheat("default-stream", "works on a side stream so the timer sees nothing", "stream",
          replace_once(CUDA_LAUNCH, "attention_rows<<<grid, ROWS_PER_BLOCK * 32, shared, 0>>>(")),
    Cheat("mutates-inputs", "mutates its inputs", "modified its inputs", CUDA.wrap("""
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  int rc = honest_fwd(p, stream);
  cudaMemsetAsync((void*)p->q, 0x7f, 2, stream);
  return rc;
}
""")),
    Cheat("uses-cublas", "calls a library the task forbids", "static guard",
          replace_once("#include <cuda_bf16.h>", "#include <cuda_bf16.h>\n#include <cublas_v2.h>")),
    Cheat("calls-system", "no system() in host code", "static guard", chain(
        replace_once("#include <math.h>", "#include <math.h>\n#include <stdlib.h>"),
        CUDA.prefix('  system("nvidia-smi");\n'))),
    Cheat("replays-on-same-buffers", "a speed that beats the roofline (skips work on repeated buffers)",
          "repeated calls", CUDA.wrap("""
static const void* last_q; static void* last_o;
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  if (p->q == last_q && p->o == last_o) return 0;
  last_q = p->q; last_o = p->o;
  return honest_fwd(p, stream);
}
""")),
]
