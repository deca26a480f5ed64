// A first kernel for `evokernel task new row-softmax --from-module examples/modules/row_softmax.py`:
// one row per OpenMP iteration, max, then the exponentials' sum, then the scaled exponentials.
#include <math.h>
#include "evk_row_softmax.h"

int evk_row_softmax(const evk_row_softmax_params* p) {
  const long long rows = p->x_d0, columns = p->x_d1;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < rows; ++r) {
    const float* x = p->x + r * columns;
    float* out = p->out + r * columns;
    float largest = -INFINITY;
    for (long long c = 0; c < columns; ++c) largest = fmaxf(largest, x[c]);
    float sum = 0.0f;
    for (long long c = 0; c < columns; ++c) {
      out[c] = expf(x[c] - largest);
      sum += out[c];
    }
    const float scale = 1.0f / sum;
    for (long long c = 0; c < columns; ++c) out[c] *= scale;
  }
  return 0;
}
