// ABI of the `rmsnorm-cpu` example task (C with OpenMP, fp32): RMSNorm with a residual add, fused.
//   h            = x + residual                        (per element)
//   residual_out = h
//   out          = h / sqrt(mean(h * h over the row) + eps) * weight
// Tensors are contiguous, row-major [rows, hidden] (weight: [hidden]).
#pragma once

typedef struct {
  const float *x, *residual, *weight;  // read only
  float *out, *residual_out;           // [rows, hidden]
  int rows, hidden;
  float eps;
} evk_rmsnorm_params;

#ifdef __cplusplus
extern "C"
#endif
int evk_rmsnorm(const evk_rmsnorm_params* p);  // 0 = ok
