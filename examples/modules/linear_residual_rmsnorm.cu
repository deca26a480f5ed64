// A first CUDA kernel for `evokernel task new linear-residual-rmsnorm --from-module
// examples/modules/linear_residual_rmsnorm.py --language cuda`: out = RMSNorm(x W^T + b + residual) * weight in
// one launch. A cluster of four blocks owns 16 whole rows, each block a quarter of the 128-column groups: eight
// warps compute a group's 128 columns with bf16 WMMA (fp32 accumulators) over 128-wide slices of x and W, add bias
// and residual, store the sum and add its squares to the block's row totals; the four blocks then read each
// other's totals (distributed shared memory) and scale their own columns by the root mean square and the norm's
// weight (eps = 1e-6: the module's). The problem is small (256 x 256 x 512), so the kernel is bound by chains of
// memory latency, not by arithmetic: every thread issues all its loads of a slice at once (16-byte vectors into
// registers), the next slice's loads are in flight while the tensor cores and the epilogue work, and the epilogue
// and the scaling move 8 elements a thread in one 16-byte access each.
#include <cooperative_groups.h>
#include <mma.h>

#include "evk_linear_residual_rmsnorm.h"

using namespace nvcuda;
namespace cg = cooperative_groups;

constexpr int TILE_M = 16, WARPS = 8, THREADS = WARPS * 32, TILE_N = WARPS * 16, TILE_K = 128;
constexpr int PAD = 8;  // shared rows of TILE_K + PAD bf16: 16-byte aligned, a multiple of 8 elements (WMMA)
constexpr int VEC = 8;  // bf16 elements in one 16-byte load
constexpr int A_LOADS = TILE_M * TILE_K / VEC / THREADS, B_LOADS = TILE_N * TILE_K / VEC / THREADS;
static_assert(A_LOADS * VEC * THREADS == TILE_M * TILE_K && B_LOADS * VEC * THREADS == TILE_N * TILE_K, "tiles");
constexpr int CLUSTER = 4;  // blocks that share 16 rows, each with its own column groups
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

// Eight consecutive bf16 as floats, and back.
static __device__ void unpack(uint4 vector, float (&values)[VEC]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    const float2 pair = __bfloat1622float2(pairs[j]);
    values[2 * j] = pair.x;
    values[2 * j + 1] = pair.y;
  }
}

static __device__ uint4 pack(const float (&values)[VEC]) {
  uint4 vector;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&vector);
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) pairs[j] = __floats2bfloat162_rn(values[2 * j], values[2 * j + 1]);
  return vector;
}

// Elements `column` to `column + 8` of a row (zeros past `columns`): one 16-byte access where `vectors`.
static __device__ void read_eight(const __nv_bfloat16* row, long long column, long long columns, bool vectors,
                                  float (&values)[VEC]) {
  if (vectors) {
    unpack(*reinterpret_cast<const uint4*>(row + column), values);
    return;
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) values[j] = column + j < columns ? __bfloat162float(row[column + j]) : 0.0f;
}

static __device__ void write_eight(__nv_bfloat16* row, long long column, long long columns, bool vectors,
                                   const float (&values)[VEC]) {
  if (vectors) {
    *reinterpret_cast<uint4*>(row + column) = pack(values);
    return;
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j)
    if (column + j < columns) row[column + j] = __float2bfloat16(values[j]);
}

// The row and columns of the 8 elements this thread takes in a group's epilogue and scaling: 16 threads a row.
constexpr int THREADS_PER_ROW = TILE_N / VEC;
static_assert(THREADS_PER_ROW * TILE_M == THREADS && THREADS_PER_ROW <= 32, "one vector of a group per thread");

__global__ void __cluster_dims__(1, CLUSTER, 1) __launch_bounds__(THREADS) linear_residual_rmsnorm(
    const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
    const __nv_bfloat16* norm_weight, __nv_bfloat16* out, long long rows, long long inner, long long columns,
    bool vectors, bool rows_vectors) {
  __shared__ __align__(32) __nv_bfloat16 a_tile[TILE_M][TILE_K + PAD];
  __shared__ __align__(32) __nv_bfloat16 b_tile[TILE_N][TILE_K + PAD];
  __shared__ __align__(32) float c_tile[TILE_M][TILE_N + 4];
  __shared__ float squares[TILE_M], totals[TILE_M];
  cg::cluster_group cluster = cg::this_cluster();
  const long long row0 = blockIdx.x * (long long)TILE_M;
  const int warp = threadIdx.x / 32;
  const int r = threadIdx.x / THREADS_PER_ROW, n = threadIdx.x % THREADS_PER_ROW * VEC;  // epilogue and scaling
  const bool row_here = row0 + r < rows;
  if (threadIdx.x < TILE_M) squares[threadIdx.x] = 0.0f;
  const long long k_slices = inner > 0 ? (inner + TILE_K - 1) / TILE_K : 1;
  const long long groups = (columns + TILE_N - 1) / TILE_N;  // this block's: blockIdx.y, + CLUSTER, ...
  const long long own_groups = groups > blockIdx.y ? (groups - blockIdx.y + CLUSTER - 1) / CLUSTER : 0;
  const long long slices = k_slices * own_groups;  // (group, k) slices in turn
  auto group_start = [&](long long slice) { return (blockIdx.y + CLUSTER * (slice / k_slices)) * TILE_N; };
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  Slice next;
  if (slices > 0) load_slice(next, x, weight, row0, group_start(0), 0, rows, inner, columns, vectors);
  for (long long s = 0; s < slices; ++s) {
    const long long col0 = group_start(s);
    store_slice(next, a_tile, b_tile);
    __syncthreads();
    if (s + 1 < slices)  // the next slice's loads fly while the tensor cores (and the epilogue) work
      load_slice(next, x, weight, row0, group_start(s + 1), (s + 1) % k_slices * TILE_K, rows, inner, columns,
                 vectors);
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
    // this group's columns are done: bias and residual added, the sum stored, its squares added to the rows'
    wmma::store_matrix_sync(&c_tile[0][warp * 16], acc, TILE_N + 4, wmma::mem_row_major);
    wmma::fill_fragment(acc, 0.0f);
    __syncthreads();
    float square = 0.0f;
    if (row_here && col0 + n < columns) {
      float plus_bias[VEC], plus_residual[VEC], sum[VEC];
      read_eight(bias, col0 + n, columns, rows_vectors, plus_bias);
      read_eight(residual + (row0 + r) * columns, col0 + n, columns, rows_vectors, plus_residual);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        // rounded to bf16 as the module's sum is, before its squares are taken
        sum[j] = __bfloat162float(__float2bfloat16(c_tile[r][n + j] + plus_bias[j] + plus_residual[j]));
        square += col0 + n + j < columns ? sum[j] * sum[j] : 0.0f;
      }
      write_eight(out + (row0 + r) * columns, col0 + n, columns, rows_vectors, sum);
    }
    for (int offset = THREADS_PER_ROW / 2; offset > 0; offset /= 2)  // within the row's 16 threads
      square += __shfl_xor_sync(0xffffffffu, square, offset);
    if (threadIdx.x % THREADS_PER_ROW == 0) squares[r] += square;  // one thread a row in this epilogue
    __syncthreads();
  }
  cluster.sync();  // every block's squares are final
  if (threadIdx.x < TILE_M) {
    float total = 0.0f;
    for (int rank = 0; rank < CLUSTER; ++rank) total += cluster.map_shared_rank(squares, rank)[threadIdx.x];
    totals[threadIdx.x] = total;
  }
  cluster.sync();  // no block leaves (its shared memory) before the others have read it; totals visible
  if (!row_here) return;
  const float scale = rsqrtf(totals[r] / (float)columns + EPS);
  for (long long group = 0; group < own_groups; ++group) {  // this block's own writes only
    const long long column = (blockIdx.y + CLUSTER * group) * TILE_N + n;
    if (column >= columns) continue;
    float sum[VEC], gain[VEC];
    read_eight(out + (row0 + r) * columns, column, columns, rows_vectors, sum);
    read_eight(norm_weight, column, columns, rows_vectors, gain);
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum[j] *= scale * gain[j];
    write_eight(out + (row0 + r) * columns, column, columns, rows_vectors, sum);
  }
}

static bool aligned(const void* pointer) { return reinterpret_cast<unsigned long long>(pointer) % 16 == 0; }

int evk_linear_residual_rmsnorm(const evk_linear_residual_rmsnorm_params* p, cudaStream_t stream) {
  // 16-byte accesses need 16-byte aligned rows: the matrices' starts, and rows a multiple of 8 elements long
  const bool vectors = p->x_d1 % VEC == 0 && aligned(p->x) && aligned(p->linear_weight);
  const bool rows_vectors = p->linear_weight_d0 % VEC == 0 && aligned(p->residual) && aligned(p->linear_bias) &&
                            aligned(p->norm_weight) && aligned(p->out);
  const dim3 blocks((unsigned)((p->x_d0 + TILE_M - 1) / TILE_M), CLUSTER);
  linear_residual_rmsnorm<<<blocks, THREADS, 0, stream>>>(p->x, p->residual, p->linear_weight, p->linear_bias,
                                                          p->norm_weight, p->out, p->x_d0, p->x_d1,
                                                          p->linear_weight_d0, vectors, rows_vectors);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
