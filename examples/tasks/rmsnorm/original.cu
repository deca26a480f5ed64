// Original kernel of the `rmsnorm` example task: one block per row; each thread adds and squares its
// share of the row (16-byte loads where the row allows), a block reduction gives the mean square, then
// the row is read again (from L2) and normalised. The knobs are what a search without an LLM can tune.
#include <cuda_bf16.h>
#include "evk_rmsnorm.h"

#define THREADS 256  // @knob 128,256,512,1024
#define VEC 8        // @knob 1,2,4,8

struct alignas(16) Pack { __nv_bfloat16 v[VEC]; };

__device__ float block_sum(float value) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  value = lane < THREADS / 32 ? partial[lane] : 0.f;
  if (warp == 0)
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __shared__ float total;
  if (threadIdx.x == 0) total = value;
  __syncthreads();
  return total;
}

template <int W>
__global__ void __launch_bounds__(THREADS) rmsnorm_rows(evk_rmsnorm_params p) {
  const long row = blockIdx.x;
  const int hidden = p.hidden;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x) + row * hidden;
  const __nv_bfloat16* r = static_cast<const __nv_bfloat16*>(p.residual) + row * hidden;
  const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(p.weight);
  __nv_bfloat16* h = static_cast<__nv_bfloat16*>(p.residual_out) + row * hidden;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + row * hidden;
  float sum = 0.f;
  for (int j = threadIdx.x * W; j < hidden; j += THREADS * W) {
    __nv_bfloat16 xs[W], rs[W], hs[W];
    if (W > 1) {
      *reinterpret_cast<Pack*>(xs) = *reinterpret_cast<const Pack*>(x + j);
      *reinterpret_cast<Pack*>(rs) = *reinterpret_cast<const Pack*>(r + j);
    } else {
      xs[0] = x[j];
      rs[0] = r[j];
    }
#pragma unroll
    for (int u = 0; u < W; ++u) {
      const float v = __bfloat162float(xs[u]) + __bfloat162float(rs[u]);
      hs[u] = __float2bfloat16(v);
      sum += v * v;
    }
    if (W > 1) *reinterpret_cast<Pack*>(h + j) = *reinterpret_cast<const Pack*>(hs);
    else h[j] = hs[0];
  }
  const float inv = rsqrtf(block_sum(sum) / hidden + p.eps);
  for (int j = threadIdx.x; j < hidden; j += THREADS) {
    const float v = __bfloat162float(x[j]) + __bfloat162float(r[j]);  // h again, unrounded
    out[j] = __float2bfloat16(v * inv * __bfloat162float(w[j]));
  }
}

extern "C" int evk_rmsnorm(const evk_rmsnorm_params* p, cudaStream_t stream) {
  if (!p || !p->x || !p->residual || !p->weight || !p->out || !p->residual_out) return 1;
  if (p->rows <= 0 || p->hidden <= 0) return 2;
  if (p->hidden % VEC == 0) rmsnorm_rows<VEC><<<p->rows, THREADS, 0, stream>>>(*p);
  else rmsnorm_rows<1><<<p->rows, THREADS, 0, stream>>>(*p);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
