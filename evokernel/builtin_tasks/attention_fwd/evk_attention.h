// evokernel ABI for the `attention-fwd` task (CUDA, bf16).
// Tensors are contiguous, layout [batch, seqlen, heads, head_dim]; q has heads_q heads, k and v
// have heads_kv heads (heads_q is a multiple of heads_kv: grouped-query attention, query head h
// reads key/value head h / (heads_q / heads_kv)).
// causal = 1 masks key j for query i when j > i + (seqlen_k - seqlen_q) (aligned to the
// bottom-right, as FlashAttention does); a query row with no visible key writes zeros.
#pragma once
#include <cuda_runtime.h>

typedef struct {
  const void *q, *k, *v;  // __nv_bfloat16, read only
  void *o;                // __nv_bfloat16, [batch, seqlen_q, heads_q, head_dim]
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  int causal;
  float softmax_scale;    // multiplies q.k before the softmax
} evk_attention_params;

#ifdef __cplusplus
extern "C"
#endif
int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream);  // 0 = ok
