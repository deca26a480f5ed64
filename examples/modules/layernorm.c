// A first kernel for `evokernel task new layernorm --from-module examples/modules/layernorm.py`: one row per
// OpenMP iteration, the mean, then the variance about it, then the normalised, scaled and shifted row.
#include <math.h>
#include "evk_layernorm.h"

int evk_layernorm(const evk_layernorm_params* p) {
  const long long rows = p->x_d0, hidden = p->x_d1;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < rows; ++r) {
    const float* x = p->x + r * hidden;
    float* out = p->out + r * hidden;
    double sum = 0.0;
    for (long long c = 0; c < hidden; ++c) sum += x[c];
    const float mean = (float)(sum / hidden);
    double squares = 0.0;
    for (long long c = 0; c < hidden; ++c) squares += (double)(x[c] - mean) * (x[c] - mean);
    const float inverse = 1.0f / sqrtf((float)(squares / hidden) + 1e-5f);
    for (long long c = 0; c < hidden; ++c) out[c] = (x[c] - mean) * inverse * p->norm_weight[c] + p->norm_bias[c];
  }
  return 0;
}
