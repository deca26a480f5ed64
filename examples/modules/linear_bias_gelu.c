// A first kernel for `evokernel task new linear-bias-gelu --from-module examples/modules/linear_bias_gelu.py`:
// out = gelu(x @ weight^T + bias), weight as nn.Linear keeps it ([out_features, in_features]); one output row
// per OpenMP iteration, a dot product per element.
#include <math.h>
#include "evk_linear_bias_gelu.h"

int evk_linear_bias_gelu(const evk_linear_bias_gelu_params* p) {
  const long long rows = p->x_d0, inner = p->x_d1, columns = p->linear_weight_d0;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < rows; ++r) {
    const float* x = p->x + r * inner;
    for (long long c = 0; c < columns; ++c) {
      const float* w = p->linear_weight + c * inner;
      float acc = p->linear_bias[c];
      for (long long k = 0; k < inner; ++k) acc += x[k] * w[k];
      p->out[r * columns + c] = 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
    }
  }
  return 0;
}
