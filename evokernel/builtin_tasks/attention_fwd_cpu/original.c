// Original kernel of the `attention-fwd-cpu` task: blocked attention with an online softmax,
// OpenMP over (batch, head, query block). Correct for every shape the ABI allows; the knobs
// below are what a search without an LLM can tune.
#include <math.h>
#include <omp.h>
#include "evk_attention_cpu.h"

#define BLOCK_Q 4      // @knob 1,2,4,8,16,32
#define BLOCK_K 8      // @knob 4,8,16,32,64
#define KEY_OUTER 0    // @knob 0,1
#define THREADS 1      // @knob 0,1,2,4

int evk_attention_fwd(const evk_attention_params* p) {
  if (!p || !p->q || !p->k || !p->v || !p->o) return 1;
  const int B = p->batch, Hq = p->heads_q, Hkv = p->heads_kv, Sq = p->seqlen_q, Sk = p->seqlen_k;
  const int D = p->head_dim;
  if (B <= 0 || Hq <= 0 || Hkv <= 0 || Sq <= 0 || Sk <= 0 || D <= 0 || Hq % Hkv) return 2;
  const long q_stride = (long)Hq * D, kv_stride = (long)Hkv * D;
  const int group = Hq / Hkv, offset = Sk - Sq, q_blocks = (Sq + BLOCK_Q - 1) / BLOCK_Q;
  const float scale = p->softmax_scale;
  const int threads = THREADS > 0 ? THREADS : omp_get_max_threads();

#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(threads)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int qb = 0; qb < q_blocks; ++qb) {
        const int q0 = qb * BLOCK_Q, rows = Sq - q0 < BLOCK_Q ? Sq - q0 : BLOCK_Q;
        const float* q = p->q + ((long)b * Sq + q0) * q_stride + (long)h * D;
        const float* k = p->k + (long)b * Sk * kv_stride + (long)(h / group) * D;
        const float* v = p->v + (long)b * Sk * kv_stride + (long)(h / group) * D;
        float* o = p->o + ((long)b * Sq + q0) * q_stride + (long)h * D;
        float m[BLOCK_Q], l[BLOCK_Q], s[BLOCK_Q][BLOCK_K], acc[BLOCK_Q][D];
        int last[BLOCK_Q];  // last visible key of each row
        for (int r = 0; r < rows; ++r) {
          m[r] = -INFINITY; l[r] = 0.f;
          last[r] = p->causal ? q0 + r + offset : Sk - 1;
          if (last[r] > Sk - 1) last[r] = Sk - 1;
          for (int d = 0; d < D; ++d) acc[r][d] = 0.f;
        }
        for (int k0 = 0; k0 < Sk; k0 += BLOCK_K) {
          const int cols = Sk - k0 < BLOCK_K ? Sk - k0 : BLOCK_K;
          if (KEY_OUTER) {
            for (int c = 0; c < cols; ++c)
              for (int r = 0; r < rows; ++r) {
                float dot = 0.f;
                for (int d = 0; d < D; ++d) dot += q[r * q_stride + d] * k[(k0 + c) * kv_stride + d];
                s[r][c] = k0 + c <= last[r] ? dot * scale : -INFINITY;
              }
          } else {
            for (int r = 0; r < rows; ++r)
              for (int c = 0; c < cols; ++c) {
                float dot = 0.f;
                for (int d = 0; d < D; ++d) dot += q[r * q_stride + d] * k[(k0 + c) * kv_stride + d];
                s[r][c] = k0 + c <= last[r] ? dot * scale : -INFINITY;
              }
          }
          for (int r = 0; r < rows; ++r) {
            if (k0 > last[r]) continue;
            float block_max = m[r];
            for (int c = 0; c < cols; ++c) block_max = s[r][c] > block_max ? s[r][c] : block_max;
            const float correction = expf(m[r] - block_max);
            l[r] *= correction;
            for (int d = 0; d < D; ++d) acc[r][d] *= correction;
            for (int c = 0; c < cols; ++c) {
              const float w = expf(s[r][c] - block_max);
              l[r] += w;
              for (int d = 0; d < D; ++d) acc[r][d] += w * v[(k0 + c) * kv_stride + d];
            }
            m[r] = block_max;
          }
        }
        for (int r = 0; r < rows; ++r)
          for (int d = 0; d < D; ++d) o[r * q_stride + d] = l[r] > 0.f ? acc[r][d] / l[r] : 0.f;
      }
  return 0;
}
