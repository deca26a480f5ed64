// A first CUDA kernel for `evokernel task new embedding-gather --from-module examples/modules/embedding_gather.py
// --language cuda`: out[b, t, :] = table[index[b, t], :] * sqrt(dim) + position[b, t, :], one token's row per
// block, in fp32 arithmetic on bf16 values.
#include "evk_embedding_gather.h"

constexpr int THREADS = 128;

__global__ void gather_rows(const long long* index, const __nv_bfloat16* position, const __nv_bfloat16* table,
                            __nv_bfloat16* out, long long dim, float scale) {
  const long long token = blockIdx.x;
  const __nv_bfloat16* row = table + index[token] * dim;
  const __nv_bfloat16* where = position + token * dim;
  __nv_bfloat16* o = out + token * dim;
  for (long long c = threadIdx.x; c < dim; c += THREADS)
    o[c] = __float2bfloat16(__bfloat162float(row[c]) * scale + __bfloat162float(where[c]));
}

int evk_embedding_gather(const evk_embedding_gather_params* p, cudaStream_t stream) {
  const long long tokens = p->index_d0 * p->index_d1, dim = p->table_weight_d1;
  gather_rows<<<(unsigned)tokens, THREADS, 0, stream>>>(p->index, p->position, p->table_weight, p->out, dim,
                                                         sqrtf((float)dim));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
