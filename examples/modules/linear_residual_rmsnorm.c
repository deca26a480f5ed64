// A first kernel for `evokernel task new linear-residual-rmsnorm --from-module
// examples/modules/linear_residual_rmsnorm.py`: one row per OpenMP iteration; h = x @ weight^T + bias + residual
// into the output row, then the row scaled by 1 / sqrt(mean(h * h) + eps) and the norm's weight.
#include <math.h>
#include "evk_linear_residual_rmsnorm.h"

int evk_linear_residual_rmsnorm(const evk_linear_residual_rmsnorm_params* p) {
  const long long rows = p->x_d0, inner = p->x_d1, columns = p->linear_weight_d0;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < rows; ++r) {
    const float* x = p->x + r * inner;
    float* out = p->out + r * columns;
    double squares = 0.0;
    for (long long c = 0; c < columns; ++c) {
      const float* w = p->linear_weight + c * inner;
      float acc = p->linear_bias[c];
      for (long long k = 0; k < inner; ++k) acc += x[k] * w[k];
      out[c] = acc + p->residual[r * columns + c];
      squares += (double)out[c] * out[c];
    }
    const float inverse = 1.0f / sqrtf((float)(squares / columns) + 1e-6f);
    for (long long c = 0; c < columns; ++c) out[c] *= inverse * p->norm_weight[c];
  }
  return 0;
}
