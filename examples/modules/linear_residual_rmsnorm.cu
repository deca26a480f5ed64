// A first CUDA kernel for `evokernel task new linear-residual-rmsnorm --from-module
// examples/modules/linear_residual_rmsnorm.py --language cuda`: out = RMSNorm(x W^T + b + residual) * weight in
// one launch. A block owns 16 whole rows: eight warps compute 128 columns at a time with bf16 WMMA (fp32
// accumulators) over 128-wide slices of x and W, add bias and residual, store the sum and add its squares to the
// row's total; once every column is done, the block scales its rows by the root mean square and the norm's
// weight (eps = 1e-6: the module's). The problem is small (256 x 256 x 512), so the kernel is bound by memory
// latency: every thread issues all its loads of a slice at once (16-byte vectors into registers), and the next
// slice's loads (the next columns' first slice too) are in flight while the tensor cores and the epilogue work.
#include <mma.h>

#include "evk_linear_residual_rmsnorm.h"

using namespace nvcuda;

constexpr int TILE_M = 16, WARPS = 8, THREADS = WARPS * 32, TILE_N = WARPS * 16, TILE_K = 128;
constexpr int PAD = 8;  // shared rows of TILE_K + PAD bf16: 16-byte aligned, a multiple of 8 elements (WMMA)
constexpr int VEC = 8;  // bf16 elements in one 16-byte load
constexpr int A_LOADS = TILE_M * TILE_K / VEC / THREADS, B_LOADS = TILE_N * TILE_K / VEC / THREADS;
static_assert(A_LOADS * VEC * THREADS == TILE_M * TILE_K && B_LOADS * VEC * THREADS == TILE_N * TILE_K, "tiles");
constexpr float EPS = 1e-6f;

// Eight consecutive elements of row `row` from column `k`, zero outside the matrix; one 16-byte load where the
// rows are 16-byte aligned (`vectors`), else element by element.
static __device__ uint4 load_eight(const __nv_bfloat16* matrix, long long row, long long rows, long long k,
                                   long long inner, bool vectors) {
  if (row >= rows) return make_uint4(0, 0, 0, 0);
  const __nv_bfloat16* at = matrix + row * inner + k;
  if (vectors && k + VEC <= inner) return *reinterpret_cast<const uint4*>(at);
  unsigned int words[VEC / 2];
  for (int j = 0; j < VEC / 2; ++j) {
    const unsigned int low = k + 2 * j < inner ? __bfloat16_as_ushort(at[2 * j]) : 0u;
    const unsigned int high = k + 2 * j + 1 < inner ? __bfloat16_as_ushort(at[2 * j + 1]) : 0u;
    words[j] = low | high << 16;
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// One slice of x (rows row0...) and of W (rows col0...), columns k0 to k0 + TILE_K, in this thread's registers.
struct Slice {
  uint4 a[A_LOADS], b[B_LOADS];
};

static __device__ void load_slice(Slice& slice, const __nv_bfloat16* x, const __nv_bfloat16* weight, long long row0,
                                  long long col0, long long k0, long long rows, long long inner, long long columns,
                                  bool vectors) {
#pragma unroll
  for (int i = 0; i < A_LOADS; ++i) {
    const int at = threadIdx.x + i * THREADS, r = at / (TILE_K / VEC), k = at % (TILE_K / VEC) * VEC;
    slice.a[i] = load_eight(x, row0 + r, rows, k0 + k, inner, vectors);
  }
#pragma unroll
  for (int i = 0; i < B_LOADS; ++i) {
    const int at = threadIdx.x + i * THREADS, n = at / (TILE_K / VEC), k = at % (TILE_K / VEC) * VEC;
    slice.b[i] = load_eight(weight, col0 + n, columns, k0 + k, inner, vectors);
  }
}

static __device__ void store_slice(const Slice& slice, __nv_bfloat16 (*a_tile)[TILE_K + PAD],
                                   __nv_bfloat16 (*b_tile)[TILE_K + PAD]) {
#pragma unroll
  for (int i = 0; i < A_LOADS; ++i) {
    const int at = threadIdx.x + i * THREADS;
    *reinterpret_cast<uint4*>(&a_tile[at / (TILE_K / VEC)][at % (TILE_K / VEC) * VEC]) = slice.a[i];
  }
#pragma unroll
  for (int i = 0; i < B_LOADS; ++i) {
    const int at = threadIdx.x + i * THREADS;
    *reinterpret_cast<uint4*>(&b_tile[at / (TILE_K / VEC)][at % (TILE_K / VEC) * VEC]) = slice.b[i];
  }
}

__global__ void __launch_bounds__(THREADS) linear_residual_rmsnorm(
    const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
    const __nv_bfloat16* norm_weight, __nv_bfloat16* out, long long rows, long long inner, long long columns,
    bool vectors) {
  __shared__ __align__(32) __nv_bfloat16 a_tile[TILE_M][TILE_K + PAD];
  __shared__ __align__(32) __nv_bfloat16 b_tile[TILE_N][TILE_K + PAD];
  __shared__ __align__(32) float c_tile[TILE_M][TILE_N + 4];
  __shared__ float squares[TILE_M];
  const long long row0 = blockIdx.x * (long long)TILE_M;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x < TILE_M) squares[threadIdx.x] = 0.0f;
  const long long k_slices = inner > 0 ? (inner + TILE_K - 1) / TILE_K : 1;
  const long long slices = k_slices * ((columns + TILE_N - 1) / TILE_N);  // (columns, k) slices in turn
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  Slice next;
  load_slice(next, x, weight, row0, 0, 0, rows, inner, columns, vectors);
  for (long long s = 0; s < slices; ++s) {
    const long long col0 = s / k_slices * TILE_N;
    store_slice(next, a_tile, b_tile);
    __syncthreads();
    if (s + 1 < slices)  // the next slice's loads fly while the tensor cores (and the epilogue) work
      load_slice(next, x, weight, row0, (s + 1) / k_slices * TILE_N, (s + 1) % k_slices * TILE_K, rows, inner,
                 columns, vectors);
#pragma unroll
    for (int kk = 0; kk < TILE_K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;  // W's rows: W^T's columns
      wmma::load_matrix_sync(a, &a_tile[0][kk], TILE_K + PAD);
      wmma::load_matrix_sync(b, &b_tile[warp * 16][kk], TILE_K + PAD);
      wmma::mma_sync(acc, a, b, acc);
    }
    __syncthreads();
    if ((s + 1) % k_slices != 0) continue;
    // these columns are done: bias and residual added, the sum stored, its squares added to the rows' totals
    wmma::store_matrix_sync(&c_tile[0][warp * 16], acc, TILE_N + 4, wmma::mem_row_major);
    wmma::fill_fragment(acc, 0.0f);
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
  // 16-byte loads need 16-byte aligned rows: both matrices' starts, and rows a multiple of 8 elements long
  const bool vectors = p->x_d1 % VEC == 0 && reinterpret_cast<unsigned long long>(p->x) % 16 == 0 &&
                       reinterpret_cast<unsigned long long>(p->linear_weight) % 16 == 0;
  const unsigned blocks = (unsigned)((p->x_d0 + TILE_M - 1) / TILE_M);
  linear_residual_rmsnorm<<<blocks, THREADS, 0, stream>>>(p->x, p->residual, p->linear_weight, p->linear_bias,
                                                          p->norm_weight, p->out, p->x_d0, p->x_d1,
                                                          p->linear_weight_d0, vectors);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
