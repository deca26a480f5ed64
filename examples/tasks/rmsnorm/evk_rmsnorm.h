// ABI of the `rmsnorm` example task (CUDA, bf16): RMSNorm with a residual add, fused.
//   h            = x + residual                        (per element, in fp32)
//   residual_out = h                                   (rounded to bf16)
//   out          = h / sqrt(mean(h * h over the row) + eps) * weight   (fp32 math, rounded to bf16)
// Tensors are contiguous, row-major [rows, hidden] (weight: [hidden]); pointers come from the
// allocator (256-byte aligned) but a row of an odd hidden size is not 16-byte aligned.
#pragma once
#include <cuda_runtime.h>

typedef struct {
  const void *x, *residual, *weight;  // __nv_bfloat16, read only
  void *out, *residual_out;           // __nv_bfloat16, [rows, hidden]
  int rows, hidden;
  float eps;
} evk_rmsnorm_params;

#ifdef __cplusplus
extern "C"
#endif
int evk_rmsnorm(const evk_rmsnorm_params* p, cudaStream_t stream);  // 0 = ok
