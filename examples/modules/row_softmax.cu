// A first CUDA kernel for `evokernel task new row-softmax --from-module examples/modules/row_softmax.py
// --language cuda`: one block per row, the row's maximum and sum reduced across the block in fp32.
#include "evk_row_softmax.h"

constexpr int THREADS = 256;

static __device__ float block_reduce(float value, bool take_max, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = take_max ? fmaxf(value, other) : value + other;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = value;
  __syncthreads();
  value = scratch[0];
  for (int w = 1; w < THREADS / 32; ++w) value = take_max ? fmaxf(value, scratch[w]) : value + scratch[w];
  __syncthreads();
  return value;
}

__global__ void softmax_rows(const __nv_bfloat16* x, __nv_bfloat16* out, long long columns) {
  __shared__ float scratch[THREADS / 32];
  const __nv_bfloat16* in = x + blockIdx.x * columns;
  __nv_bfloat16* o = out + blockIdx.x * columns;
  float largest = __int_as_float(0xff800000);  // -inf
  for (long long c = threadIdx.x; c < columns; c += THREADS) largest = fmaxf(largest, __bfloat162float(in[c]));
  largest = block_reduce(largest, true, scratch);
  float sum = 0.0f;
  for (long long c = threadIdx.x; c < columns; c += THREADS) sum += __expf(__bfloat162float(in[c]) - largest);
  sum = block_reduce(sum, false, scratch);
  for (long long c = threadIdx.x; c < columns; c += THREADS)
    o[c] = __float2bfloat16(__expf(__bfloat162float(in[c]) - largest) / sum);
}

int evk_row_softmax(const evk_row_softmax_params* p, cudaStream_t stream) {
  softmax_rows<<<(unsigned)p->x_d0, THREADS, 0, stream>>>(p->x, p->out, p->x_d1);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
