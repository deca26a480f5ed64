// A first CUDA kernel for `evokernel task new layernorm --from-module examples/modules/layernorm.py
// --language cuda`: a warp per row, the mean and then the variance around it reduced with shuffles in fp32, then
// (x - mean) / sqrt(var + eps) * weight + bias. (eps = 1e-5: the module's.)
// A row is short (1024 elements: 32 per lane), so a row's time is its chain of memory latencies, not its bytes:
// where rows fit (up to 2048 elements, 16-byte aligned), each lane loads its share of the row, the weight and the
// bias at once as 16-byte vectors into registers, and both reductions and the output work from registers (one
// latency a row instead of one a loop iteration). Other rows take the plain loops.
#include "evk_layernorm.h"

constexpr int WARPS = 8, THREADS = WARPS * 32;
constexpr int VEC = 8;                        // bf16 elements in one 16-byte load
constexpr int CHUNKS = 8;                     // vectors a lane keeps: rows up to 32 * 8 * 8 = 2048 elements
constexpr float EPS = 1e-5f;

static __device__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

static __device__ void unpack(uint4 vector, float (&values)[VEC]) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&vector);
#pragma unroll
  for (int j = 0; j < VEC / 2; ++j) {
    const float2 pair = __bfloat1622float2(pairs[j]);
    values[2 * j] = pair.x;
    values[2 * j + 1] = pair.y;
  }
}

// The row in registers: chunk j of a lane is elements (j * 32 + lane) * 8 to + 8 (consecutive lanes, consecutive
// 16 bytes: every load of a warp is one contiguous 512-byte piece).
static __device__ void row_in_registers(const __nv_bfloat16* in, const __nv_bfloat16* weight,
                                        const __nv_bfloat16* bias, __nv_bfloat16* out, long long hidden, int lane) {
  uint4 x[CHUNKS], w[CHUNKS], b[CHUNKS];
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {  // every load issued before any is used
    const long long c = ((long long)j * 32 + lane) * VEC;
    const bool here = c < hidden;
    x[j] = here ? *reinterpret_cast<const uint4*>(in + c) : make_uint4(0, 0, 0, 0);
    w[j] = here ? *reinterpret_cast<const uint4*>(weight + c) : make_uint4(0, 0, 0, 0);
    b[j] = here ? *reinterpret_cast<const uint4*>(bias + c) : make_uint4(0, 0, 0, 0);
  }
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {
    float v[VEC];
    unpack(x[j], v);  // zeros past the row's end
#pragma unroll
    for (int e = 0; e < VEC; ++e) sum += v[e];
  }
  const float mean = warp_sum(sum) / (float)hidden;
  float spread = 0.0f;
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {
    if (((long long)j * 32 + lane) * VEC >= hidden) continue;
    float v[VEC];
    unpack(x[j], v);
#pragma unroll
    for (int e = 0; e < VEC; ++e) spread += (v[e] - mean) * (v[e] - mean);
  }
  const float scale = rsqrtf(warp_sum(spread) / (float)hidden + EPS);
#pragma unroll
  for (int j = 0; j < CHUNKS; ++j) {
    const long long c = ((long long)j * 32 + lane) * VEC;
    if (c >= hidden) continue;
    float v[VEC], vw[VEC], vb[VEC];
    unpack(x[j], v);
    unpack(w[j], vw);
    unpack(b[j], vb);
    uint4 result;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
    for (int e = 0; e < VEC / 2; ++e)
      pairs[e] = __floats2bfloat162_rn((v[2 * e] - mean) * scale * vw[2 * e] + vb[2 * e],
                                       (v[2 * e + 1] - mean) * scale * vw[2 * e + 1] + vb[2 * e + 1]);
    *reinterpret_cast<uint4*>(out + c) = result;
  }
}

static __device__ void row_in_loops(const __nv_bfloat16* in, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                    __nv_bfloat16* out, long long hidden, int lane) {
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
    out[c] = __float2bfloat16((__bfloat162float(in[c]) - mean) * scale * __bfloat162float(weight[c])
                              + __bfloat162float(bias[c]));
}

__global__ void __launch_bounds__(THREADS) layernorm_rows(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                                          const __nv_bfloat16* bias, __nv_bfloat16* out,
                                                          long long rows, long long hidden, bool registers) {
  const long long row = blockIdx.x * (long long)WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // a whole warp leaves together
  if (registers)
    row_in_registers(x + row * hidden, weight, bias, out + row * hidden, hidden, lane);
  else
    row_in_loops(x + row * hidden, weight, bias, out + row * hidden, hidden, lane);
}

static bool aligned(const void* pointer) { return reinterpret_cast<unsigned long long>(pointer) % 16 == 0; }

int evk_layernorm(const evk_layernorm_params* p, cudaStream_t stream) {
  // registers: every row fits a warp's vectors and starts 16-byte aligned (all four tensors aligned, rows a
  // multiple of 8 elements long)
  const bool registers = p->x_d1 % VEC == 0 && p->x_d1 <= 32LL * VEC * CHUNKS && aligned(p->x) &&
                         aligned(p->norm_weight) && aligned(p->norm_bias) && aligned(p->out);
  const unsigned blocks = (unsigned)((p->x_d0 + WARPS - 1) / WARPS);
  layernorm_rows<<<blocks, THREADS, 0, stream>>>(p->x, p->norm_weight, p->norm_bias, p->out, p->x_d0, p->x_d1,
                                                 registers);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
