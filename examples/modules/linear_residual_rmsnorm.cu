// A first CUDA kernel for `evokernel task new linear-residual-rmsnorm --from-module
// examples/modules/linear_residual_rmsnorm.py --language cuda`: out = RMSNorm(x W^T + b + residual) * weight in
// one launch. A block owns 16 whole rows: eight warps compute 128 columns at a time with bf16 WMMA (fp32
// accumulators), add bias and residual, store the sum and add its squares to the row's total; once every column
// is done, the block scales its rows by the root mean square and the norm's weight. (eps = 1e-6: the module's.)
#include <mma.h>

#include "evk_linear_residual_rmsnorm.h"

using namespace nvcuda;

constexpr int TILE_M = 16, WARPS = 8, THREADS = WARPS * 32, TILE_N = WARPS * 16, TILE_K = 32, PAD = 8;
constexpr float EPS = 1e-6f;

__global__ void __launch_bounds__(THREADS) linear_residual_rmsnorm(
    const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
    const __nv_bfloat16* norm_weight, __nv_bfloat16* out, long long rows, long long inner, long long columns) {
  __shared__ __align__(32) __nv_bfloat16 a_tile[TILE_M][TILE_K + PAD];
  __shared__ __align__(32) __nv_bfloat16 b_tile[TILE_N][TILE_K + PAD];
  __shared__ __align__(32) float c_tile[TILE_M][TILE_N + 4];
  __shared__ float squares[TILE_M];
  const long long row0 = blockIdx.x * (long long)TILE_M;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const __nv_bfloat16 zero = __float2bfloat16(0.0f);
  if (threadIdx.x < TILE_M) squares[threadIdx.x] = 0.0f;
  for (long long col0 = 0; col0 < columns; col0 += TILE_N) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (long long k0 = 0; k0 < inner; k0 += TILE_K) {
      for (int i = threadIdx.x; i < TILE_M * TILE_K; i += THREADS) {
        const int r = i / TILE_K, k = i % TILE_K;
        a_tile[r][k] = row0 + r < rows && k0 + k < inner ? x[(row0 + r) * inner + k0 + k] : zero;
      }
      for (int i = threadIdx.x; i < TILE_N * TILE_K; i += THREADS) {
        const int n = i / TILE_K, k = i % TILE_K;
        b_tile[n][k] = col0 + n < columns && k0 + k < inner ? weight[(col0 + n) * inner + k0 + k] : zero;
      }
      __syncthreads();
      for (int kk = 0; kk < TILE_K; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(a, &a_tile[0][kk], TILE_K + PAD);
        wmma::load_matrix_sync(b, &b_tile[warp * 16][kk], TILE_K + PAD);
        wmma::mma_sync(acc, a, b, acc);
      }
      __syncthreads();
    }
    wmma::store_matrix_sync(&c_tile[0][warp * 16], acc, TILE_N + 4, wmma::mem_row_major);
    __syncthreads();
    // a warp's 32 consecutive elements lie in one row (TILE_N is a multiple of 32): one shared add per warp
    for (int i = threadIdx.x; i < TILE_M * TILE_N; i += THREADS) {
      const int r = i / TILE_N, n = i % TILE_N;
      float square = 0.0f;
      if (row0 + r < rows && col0 + n < columns) {
        const long long at = (row0 + r) * columns + col0 + n;
        const __nv_bfloat16 sum = __float2bfloat16(c_tile[r][n] + __bfloat162float(bias[col0 + n])
                                                   + __bfloat162float(residual[at]));
        out[at] = sum;
        square = __bfloat162float(sum) * __bfloat162float(sum);
      }
      for (int offset = 16; offset > 0; offset /= 2) square += __shfl_xor_sync(0xffffffffu, square, offset);
      if (lane == 0) atomicAdd(&squares[r], square);
    }
    __syncthreads();
  }
  for (long long i = threadIdx.x; i < TILE_M * columns; i += THREADS) {  // this block's rows only: its own writes
    const long long r = i / columns, c = i % columns;
    if (row0 + r < rows) {
      const long long at = (row0 + r) * columns + c;
      const float scale = rsqrtf(squares[r] / (float)columns + EPS);
      out[at] = __float2bfloat16(__bfloat162float(out[at]) * scale * __bfloat162float(norm_weight[c]));
    }
  }
}

int evk_linear_residual_rmsnorm(const evk_linear_residual_rmsnorm_params* p, cudaStream_t stream) {
  const unsigned blocks = (unsigned)((p->x_d0 + TILE_M - 1) / TILE_M);
  linear_residual_rmsnorm<<<blocks, THREADS, 0, stream>>>(p->x, p->residual, p->linear_weight, p->linear_bias,
                                                          p->norm_weight, p->out, p->x_d0, p->x_d1,
                                                          p->linear_weight_d0);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
