// A first CUDA kernel for `evokernel task new linear-bias-gelu --from-module examples/modules/linear_bias_gelu.py
// --language cuda`: one thread per output element, a dot product in fp32, then bias and GELU.
#include "evk_linear_bias_gelu.h"

__global__ void linear_bias_gelu(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                 __nv_bfloat16* out, long long inner, long long columns) {
  const long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x, r = blockIdx.y;
  if (c >= columns) return;
  const __nv_bfloat16* row = x + r * inner;
  const __nv_bfloat16* w = weight + c * inner;
  float acc = __bfloat162float(bias[c]);
  for (long long k = 0; k < inner; ++k) acc += __bfloat162float(row[k]) * __bfloat162float(w[k]);
  out[r * columns + c] = __float2bfloat16(0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f)));
}

int evk_linear_bias_gelu(const evk_linear_bias_gelu_params* p, cudaStream_t stream) {
  const dim3 grid((unsigned)((p->linear_weight_d0 + 127) / 128), (unsigned)p->x_d0);
  linear_bias_gelu<<<grid, 128, 0, stream>>>(p->x, p->linear_weight, p->linear_bias, p->out, p->x_d1,
                                            p->linear_weight_d0);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
