// evokernel ABI for the `attention-fwd-cpu` task (C with OpenMP, fp32).
// Same contract as `attention-fwd` (see evk_attention.h) with fp32 tensors and no stream:
// layout [batch, seqlen, heads, head_dim], grouped-query heads, bottom-right causal mask,
// rows with no visible key write zeros.
#pragma once

typedef struct {
  const float *q, *k, *v;  // read only
  float *o;                // [batch, seqlen_q, heads_q, head_dim]
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  int causal;
  float softmax_scale;
} evk_attention_params;

#ifdef __cplusplus
extern "C"
#endif
int evk_attention_fwd(const evk_attention_params* p);  // 0 = ok
