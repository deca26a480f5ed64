// A first CUDA kernel for `evokernel task new layernorm --from-module examples/modules/layernorm.py
// --language cuda`: a warp per row, the mean and then the variance around it reduced with shuffles in fp32, then
// (x - mean) / sqrt(var + eps) * weight + bias. (eps = 1e-5: the module's.)
#include "evk_layernorm.h"

constexpr int WARPS = 8, THREADS = WARPS * 32;
constexpr float EPS = 1e-5f;

static __device__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__global__ void __launch_bounds__(THREADS) layernorm_rows(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                          const __nv_bfloat16* bias, __nv_bfloat16* out,
                                                          long long rows, long long hidden) {
  const long long row = blockIdx.x * (long long)WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // a whole warp leaves together
  const __nv_bfloat16* in = x + row * hidden;
  float sum = 0.0f;
  for (long long c = lane; c < hidden; c += 32) sum += __bfloat162float(in[c]);
  const float mean = warp_sum(sum) / (float)hidden;
  float spread = 0.0f;
  for (long long c = lane; c < hidden; c += 32) {
    const float d = __bfloat162float(in[c]) - mean;
    spread += d * d;
  }
  const float scale = rsqrtf(warp_sum(spread) / (float)hidden + EPS);
  for (long long c = lane; c < hidden; c += 32)
    out[row * hidden + c] = __float2bfloat16((__bfloat162float(in[c]) - mean) * scale * __bfloat162float(weight[c])
                                             + __bfloat162float(bias[c]));
}

int evk_layernorm(const evk_layernorm_params* p, cudaStream_t stream) {
  const unsigned blocks = (unsigned)((p->x_d0 + WARPS - 1) / WARPS);
  layernorm_rows<<<blocks, THREADS, 0, stream>>>(p->x, p->norm_weight, p->norm_bias, p->out, p->x_d0, p->x_d1);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
