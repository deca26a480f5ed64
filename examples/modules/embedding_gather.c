// A first kernel for `evokernel task new embedding-gather --from-module examples/modules/embedding_gather.py`:
// out[b, t, :] = table[index[b, t], :] * sqrt(dim) + position[b, t, :]; one token's row per OpenMP iteration.
#include <math.h>
#include "evk_embedding_gather.h"

int evk_embedding_gather(const evk_embedding_gather_params* p) {
  const long long tokens = p->index_d0 * p->index_d1, dim = p->table_weight_d1;
  const float scale = sqrtf((float)dim);
#pragma omp parallel for schedule(static)
  for (long long t = 0; t < tokens; ++t) {
    const float* row = p->table_weight + p->index[t] * dim;
    const float* position = p->position + t * dim;
    float* out = p->out + t * dim;
    for (long long c = 0; c < dim; ++c) out[c] = row[c] * scale + position[c];
  }
  return 0;
}
