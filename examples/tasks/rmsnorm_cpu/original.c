// Original kernel of the `rmsnorm-cpu` example task: one pass per row to add and sum squares, one to
// normalise; OpenMP over rows. The knobs are what a search without an LLM can tune.
#include <math.h>
#include "evk_rmsnorm_cpu.h"

#define ROWS_PER_CHUNK 4  // @knob 1,4,16
#define UNROLL 4          // @knob 1,4,8

int evk_rmsnorm(const evk_rmsnorm_params* p) {
  if (!p || !p->x || !p->residual || !p->weight || !p->out || !p->residual_out) return 1;
  const int rows = p->rows, hidden = p->hidden;
  if (rows <= 0 || hidden <= 0) return 2;

#pragma omp parallel for schedule(static, ROWS_PER_CHUNK)
  for (int i = 0; i < rows; ++i) {
    const float* x = p->x + (long)i * hidden;
    const float* r = p->residual + (long)i * hidden;
    float* h = p->residual_out + (long)i * hidden;
    float* out = p->out + (long)i * hidden;
    float sums[UNROLL] = {0};
    int j = 0;
    for (; j + UNROLL <= hidden; j += UNROLL)
      for (int u = 0; u < UNROLL; ++u) {
        const float v = x[j + u] + r[j + u];
        h[j + u] = v;
        sums[u] += v * v;
      }
    for (; j < hidden; ++j) {
      const float v = x[j] + r[j];
      h[j] = v;
      sums[0] += v * v;
    }
    float sum = 0.f;
    for (int u = 0; u < UNROLL; ++u) sum += sums[u];
    const float inv = 1.f / sqrtf(sum / (float)hidden + p->eps);
    for (j = 0; j < hidden; ++j) out[j] = h[j] * inv * p->weight[j];
  }
  return 0;
}
