// Original kernel of the `attention-fwd` task: simple and correct for every shape the ABI allows.
// One warp per query row, ROWS_PER_BLOCK rows of one (batch, head) per block sharing K/V tiles
// in shared memory; fp32 online softmax; no tensor cores. Speedups are measured against it.
#include <cuda_bf16.h>
#include <math.h>
#include "evk_attention.h"

#define ROWS_PER_BLOCK 8   // @knob 4,8,16
#define KEYS_PER_TILE 32   // @knob 16,32,64
#define MAX_DIM_PER_LANE 8 // head_dim <= 32 * MAX_DIM_PER_LANE

__global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
attention_rows(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
               const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o,
               int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int head_dim, int causal,
               float scale_log2) {
  extern __shared__ __nv_bfloat16 tile[];  // K then V: KEYS_PER_TILE x head_dim each
  __nv_bfloat16* k_tile = tile;
  __nv_bfloat16* v_tile = tile + KEYS_PER_TILE * head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / heads_q, h = bh % heads_q, h_kv = h / (heads_q / heads_kv);
  const int row = blockIdx.x * ROWS_PER_BLOCK + warp;
  const int offset = seqlen_k - seqlen_q;
  const long q_stride = (long)heads_q * head_dim, kv_stride = (long)heads_kv * head_dim;
  const int dims = (head_dim + 31) / 32;

  float q_reg[MAX_DIM_PER_LANE], acc[MAX_DIM_PER_LANE];
  for (int i = 0; i < MAX_DIM_PER_LANE; ++i) {
    const int d = lane + 32 * i;
    q_reg[i] = (i < dims && d < head_dim && row < seqlen_q)
                   ? __bfloat162float(q[((long)b * seqlen_q + row) * q_stride + (long)h * head_dim + d]) : 0.f;
    acc[i] = 0.f;
  }
  // Last key any row of this block may see, and the last key this row may see.
  const int block_last_row = min(seqlen_q - 1, (int)blockIdx.x * ROWS_PER_BLOCK + ROWS_PER_BLOCK - 1);
  const int block_keys = causal ? min(seqlen_k, block_last_row + offset + 1) : seqlen_k;
  const int row_last = causal ? row + offset : seqlen_k - 1;
  float running_max = -INFINITY, running_sum = 0.f;

  for (int k0 = 0; k0 < block_keys; k0 += KEYS_PER_TILE) {
    __syncthreads();
    const int keys = min(KEYS_PER_TILE, block_keys - k0);
    for (int idx = threadIdx.x; idx < keys * head_dim; idx += blockDim.x) {
      const int key = idx / head_dim, d = idx % head_dim;
      const long src = ((long)b * seqlen_k + k0 + key) * kv_stride + (long)h_kv * head_dim + d;
      k_tile[idx] = k[src];
      v_tile[idx] = v[src];
    }
    __syncthreads();
    if (row >= seqlen_q) continue;
    for (int key = 0; key < keys && k0 + key <= row_last; ++key) {
      float dot = 0.f;
      for (int i = 0; i < dims; ++i) {
        const int d = lane + 32 * i;
        if (d < head_dim) dot += q_reg[i] * __bfloat162float(k_tile[key * head_dim + d]);
      }
      for (int shift = 16; shift > 0; shift /= 2) dot += __shfl_xor_sync(0xffffffff, dot, shift);
      const float score = dot * scale_log2;
      const float new_max = fmaxf(running_max, score);
      const float correction = exp2f(running_max - new_max), weight = exp2f(score - new_max);
      running_sum = running_sum * correction + weight;
      for (int i = 0; i < dims; ++i) {
        const int d = lane + 32 * i;
        const float value = d < head_dim ? __bfloat162float(v_tile[key * head_dim + d]) : 0.f;
        acc[i] = acc[i] * correction + weight * value;
      }
      running_max = new_max;
    }
  }
  if (row >= seqlen_q) return;
  const float inv = running_sum > 0.f ? 1.f / running_sum : 0.f;
  for (int i = 0; i < dims; ++i) {
    const int d = lane + 32 * i;
    if (d < head_dim) o[((long)b * seqlen_q + row) * q_stride + (long)h * head_dim + d] = __float2bfloat16(acc[i] * inv);
  }
}

extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  if (!p || !p->q || !p->k || !p->v || !p->o) return 1;
  if (p->batch <= 0 || p->heads_q <= 0 || p->heads_kv <= 0 || p->heads_q % p->heads_kv) return 2;
  if (p->seqlen_q <= 0 || p->seqlen_k <= 0 || p->head_dim <= 0 || p->head_dim > 32 * MAX_DIM_PER_LANE) return 3;
  const size_t shared = 2ull * KEYS_PER_TILE * p->head_dim * sizeof(__nv_bfloat16);
  if (shared > 48 * 1024 &&
      cudaFuncSetAttribute(attention_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared) != cudaSuccess)
    return 4;
  const dim3 grid((p->seqlen_q + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, p->batch * p->heads_q);
  const float log2e = 1.4426950408889634f;
  attention_rows<<<grid, ROWS_PER_BLOCK * 32, shared, stream>>>(
      (const __nv_bfloat16*)p->q, (const __nv_bfloat16*)p->k, (const __nv_bfloat16*)p->v, (__nv_bfloat16*)p->o,
      p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim, p->causal, p->softmax_scale * log2e);
  return cudaGetLastError() == cudaSuccess ? 0 : 5;
}
