// A tensor-core kernel for `evokernel task new linear-bias-gelu --from-module examples/modules/linear_bias_gelu.py
// --language cuda`: out = GELU(x W^T + b) in one launch. Each block computes a 32 x 64 tile of the output with
// four warps (16 x 32 each, bf16 WMMA with fp32 accumulators), staging 32-wide slices of x and W in shared
// memory; the epilogue adds the bias and applies the exact (erf) GELU in fp32 before the one bf16 store.
#include <mma.h>

#include "evk_linear_bias_gelu.h"

using namespace nvcuda;

constexpr int TILE_M = 32, TILE_N = 64, TILE_K = 32, THREADS = 128;
constexpr int PAD = 8;  // shared rows of TILE_K + PAD bf16: a multiple of 8 elements, as WMMA needs

__global__ void __launch_bounds__(THREADS) linear_bias_gelu(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                             const __nv_bfloat16* bias, __nv_bfloat16* out,
                                                             long long rows, long long inner, long long columns) {
  __shared__ __align__(32) __nv_bfloat16 a_tile[TILE_M][TILE_K + PAD];
  __shared__ __align__(32) __nv_bfloat16 b_tile[TILE_N][TILE_K + PAD];
  __shared__ __align__(32) float c_tile[TILE_M][TILE_N + 4];
  const long long row0 = blockIdx.y * (long long)TILE_M, col0 = blockIdx.x * (long long)TILE_N;
  const int warp = threadIdx.x / 32, warp_m = warp / 2, warp_n = warp % 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2];
  wmma::fill_fragment(acc[0], 0.0f);
  wmma::fill_fragment(acc[1], 0.0f);
  const __nv_bfloat16 zero = __float2bfloat16(0.0f);
  for (long long k0 = 0; k0 < inner; k0 += TILE_K) {
    for (int i = threadIdx.x; i < TILE_M * TILE_K; i += THREADS) {  // x[row0 + r][k0 + k], zero outside
      const int r = i / TILE_K, k = i % TILE_K;
      const bool inside = row0 + r < rows && k0 + k < inner;
      a_tile[r][k] = inside ? x[(row0 + r) * inner + k0 + k] : zero;
    }
    for (int i = threadIdx.x; i < TILE_N * TILE_K; i += THREADS) {  // W[col0 + n][k0 + k], zero outside
      const int n = i / TILE_K, k = i % TILE_K;
      const bool inside = col0 + n < columns && k0 + k < inner;
      b_tile[n][k] = inside ? weight[(col0 + n) * inner + k0 + k] : zero;
    }
    __syncthreads();
    for (int kk = 0; kk < TILE_K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::load_matrix_sync(a, &a_tile[warp_m * 16][kk], TILE_K + PAD);
      for (int j = 0; j < 2; ++j) {  // W's rows are the columns of W^T: a column-major B
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(b, &b_tile[warp_n * 32 + j * 16][kk], TILE_K + PAD);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }
  for (int j = 0; j < 2; ++j)
    wmma::store_matrix_sync(&c_tile[warp_m * 16][warp_n * 32 + j * 16], acc[j], TILE_N + 4, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < TILE_M * TILE_N; i += THREADS) {
    const int r = i / TILE_N, n = i % TILE_N;
    if (row0 + r < rows && col0 + n < columns) {
      const float v = c_tile[r][n] + __bfloat162float(bias[col0 + n]);
      out[(row0 + r) * columns + col0 + n] = __float2bfloat16(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
  }
}

int evk_linear_bias_gelu(const evk_linear_bias_gelu_params* p, cudaStream_t stream) {
  const dim3 grid((unsigned)((p->linear_weight_d0 + TILE_N - 1) / TILE_N), (unsigned)((p->x_d0 + TILE_M - 1) / TILE_M));
  linear_bias_gelu<<<grid, THREADS, 0, stream>>>(p->x, p->linear_weight, p->linear_bias, p->out, p->x_d0, p->x_d1,
                                                 p->linear_weight_d0);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
