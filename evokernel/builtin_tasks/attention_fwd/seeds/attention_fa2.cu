// evokernel attention-fwd seed kernel (bf16, sm_90): FlashAttention-2 style forward pass.
//
// Per block: BLOCK_M = 16 * MTILES * WARPS query rows of one (batch, head); each warp owns
// MTILES m16 row tiles. K/V tiles of BLOCK_N keys stream through shared memory with cp.async
// (STAGES = 1: the FA2 schedule, V load overlaps Q.K^T and the next K load overlaps P.V;
// STAGES = 2: whole K/V tiles prefetched one iteration ahead). Shared-memory tiles are
// row-major [rows][D] with the 16-byte chunk index XOR-swizzled by (row & 7), so ldmatrix
// and cp.async are bank-conflict free. Q.K^T and P.V use mma.sync m16n8k16 bf16 -> fp32;
// softmax is the online (running max / running sum) form with exp2.
//
// Layout: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], o [B, Sq, Hq, D], contiguous.
// Causal: key j visible to query i iff j <= i + Sk - Sq; rows with no visible key write 0.
#include "evk_attention.h"
#include <cuda_bf16.h>
#include <stdint.h>

// ---------------------------------------------------------------------------------------
// Knobs (per head dim). BLOCK_M = 16 * MTILES * WARPS.
#define WARPS_HD64 4  // @knob 4,8
#define MTILES_HD64 2  // @knob 1,2
#define BLOCK_N_HD64 64  // @knob 64,128
#define STAGES_HD64 2  // @knob 1,2
#define QREG_HD64 1  // @knob 0,1

#define WARPS_HD128 4  // @knob 4,8
#define MTILES_HD128 2  // @knob 1,2
#define BLOCK_N_HD128 64  // @knob 32,64
#define STAGES_HD128 1  // @knob 1,2
#define QREG_HD128 0  // @knob 0,1

#define WARPS_HD256 8  // @knob 4,8
#define BLOCK_N_HD256 64  // @knob 32,64
#define STAGES_HD256 2  // @knob 1,2
#define QREG_HD256 0  // @knob 0
// ---------------------------------------------------------------------------------------

typedef __nv_bfloat16 bf16;

namespace evk_fa2 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  int sz = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(sz)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                        uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                          uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Byte offset of element (r, c) (c a multiple of 8) in a swizzled [rows][D] bf16 tile.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return (uint32_t)(r * (D * 2) + ((((c >> 3) ^ (r & 7))) << 4));
}

// Lane-constant parts of swizzled ldmatrix addresses. A lane reads tile row (row_off + lr) and
// 16-byte chunk (2 * kk + lc) with row_off a multiple of 8 and kk a compile-time step:
// chunk ^ (lr & 7) = 8 * (kk / 4) + ((2 * (kk % 4) + lc) ^ (lr & 7)), so four per-lane offsets
// plus compile-time immediates cover every access (no per-access index arithmetic).
template <int D>
struct LaneOffs {
  uint32_t x[4];
  __device__ __forceinline__ LaneOffs(uint32_t base, int lr, int lc) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      x[i] = base + (uint32_t)(lr * (D * 2) + (((2 * i + lc) ^ (lr & 7)) << 4));
  }
  // byte offset of (row_off + lr, chunk 2*kk + lc)
  __device__ __forceinline__ uint32_t at(int row_off, int kk) const {
    return x[kk & 3] + (uint32_t)(row_off * (D * 2) + ((kk >> 2) << 7));
  }
};

// Copy ROWS rows (starting at global row row0, rows >= nvalid are zero-filled) into a tile.
// Thread tid copies chunk (tid % CPR) of rows tid / CPR + it * RPI.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_tile(uint32_t s_base, const bf16* g, int row0, int nvalid,
                                          long stride, int tid) {
  constexpr int CPR = D / 8;
  constexpr int RPI = NT / CPR;  // rows per iteration
  static_assert(NT % CPR == 0 && ROWS % RPI == 0, "tile shape must divide the thread count");
  const int c = tid % CPR;
  const int r0 = tid / CPR;
  const bf16* src = g + (long)(row0 + r0) * stride + c * 8;
  const long step = (long)RPI * stride;
#pragma unroll
  for (int it = 0; it < ROWS / RPI; ++it) {
    const int r = r0 + it * RPI;
    const bool ok = (row0 + r) < nvalid;
    cp_async16(s_base + swz<D>(r, c * 8), ok ? src : g, ok);
    src += step;
  }
}

template <int D, int NW, int MT, int BN, int STAGES, bool QREG>
__global__ void __launch_bounds__(NW * 32)
    attn_fwd_kernel(const evk_attention_params p, float sl2, bool neg_scale) {
  constexpr int BM = 16 * MT * NW;
  constexpr int NT = NW * 32;
  constexpr int KD = D / 16;   // k-steps over head dim
  constexpr int NS = BN / 8;   // n8 tiles of S
  constexpr int ND = D / 8;    // n8 tiles of O
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + BM * D * 2;
  const uint32_t sV = sK + STAGES * BN * D * 2;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int num_mb = gridDim.x;
  const int mb = p.causal ? (num_mb - 1 - (int)blockIdx.x) : (int)blockIdx.x;
  const int hk = blockIdx.y / (p.heads_q / p.heads_kv);
  const int Sq = p.seqlen_q, Sk = p.seqlen_k;
  const int m0 = mb * BM;
  const long q_stride = (long)p.heads_q * D, kv_stride = (long)p.heads_kv * D;
  // Base pointers are recomputed where used (cheap integer work) rather than kept live
  // across the main loop, where registers are short.
#define EVK_GQ ((const bf16*)p.q + ((long)blockIdx.z * Sq * p.heads_q + blockIdx.y) * D)
#define EVK_GO ((bf16*)p.o + ((long)blockIdx.z * Sq * p.heads_q + blockIdx.y) * D)
#define EVK_GK ((const bf16*)p.k + ((long)blockIdx.z * Sk * p.heads_kv + hk) * D)
#define EVK_GV ((const bf16*)p.v + ((long)blockIdx.z * Sk * p.heads_kv + hk) * D)
  const int diag = Sk - Sq;  // key j visible to query i iff j <= i + diag

  int n_end = Sk;
  if (p.causal) n_end = min(Sk, min(m0 + BM, Sq) + diag);
  const int n_blocks = n_end > 0 ? (n_end + BN - 1) / BN : 0;

  if (n_blocks == 0) {
    constexpr int CPR = D / 8;
    for (int i = tid; i < BM * CPR; i += NT) {
      int r = i / CPR, c = i % CPR;
      if (m0 + r < Sq)
        *reinterpret_cast<uint4*>(EVK_GO + (long)(m0 + r) * q_stride + c * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  // Prologue.
  load_tile<BM, D, NT>(sQ, EVK_GQ, m0, Sq, q_stride, tid);
  load_tile<BN, D, NT>(sK, EVK_GK, 0, Sk, kv_stride, tid);
  cp_async_commit();
  if constexpr (STAGES == 2) {
    load_tile<BN, D, NT>(sV, EVK_GV, 0, Sk, kv_stride, tid);
    cp_async_commit();
  }

  const int g = lane >> 2, t = lane & 3;
  const int wrow = warp * MT * 16;  // first tile row of this warp
  // ldmatrix lane roles
  // Q (A operand) and V (B operand via .trans) share a lane role: one set of registers
  // serves both, V at a compile-time distance; K has its own.
  const LaneOffs<D> qo(sQ, (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
  const LaneOffs<D> ko(sK, (lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
  constexpr uint32_t V_FROM_Q = (uint32_t)((BM + STAGES * BN) * D * 2);

  float o[MT][ND][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < ND; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][i][e] = 0.f;
  float m_run[MT][2], l_run[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }
  uint32_t qf[QREG ? MT : 1][QREG ? KD : 1][4];

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * BN;
    uint32_t stage_off;  // byte offset of this iteration's K/V stage
    if constexpr (STAGES == 2) {
      cp_async_wait<1>();
      __syncthreads();
      if (j + 1 < n_blocks) {
        load_tile<BN, D, NT>(sK + ((j + 1) & 1) * BN * D * 2, EVK_GK, n0 + BN, Sk, kv_stride, tid);
      }
      cp_async_commit();
      if (j + 1 < n_blocks) {
        load_tile<BN, D, NT>(sV + ((j + 1) & 1) * BN * D * 2, EVK_GV, n0 + BN, Sk, kv_stride, tid);
      }
      cp_async_commit();
      stage_off = (j & 1) * (BN * D * 2);
    } else {
      cp_async_wait<0>();
      __syncthreads();
      load_tile<BN, D, NT>(sV, EVK_GV, n0, Sk, kv_stride, tid);
      cp_async_commit();
      stage_off = 0;
    }
    if constexpr (QREG) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < KD; ++kk)
            ldsm_x4(qf[mt][kk][0], qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3],
                    qo.at(wrow + mt * 16, kk));
      }
    }

    // S = Q K^T
    float s[MT][NS][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NS; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (QREG) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kk][e];
        } else {
          ldsm_x4(a[mt][0], a[mt][1], a[mt][2], a[mt][3],
                  qo.at(wrow + mt * 16, kk));
        }
      }
#pragma unroll
      for (int nn = 0; nn < NS / 2; ++nn) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, ko.at(nn * 16, kk) + stage_off);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][2 * nn], a[mt], b0, b1);
          mma_bf16(s[mt][2 * nn + 1], a[mt], b2, b3);
        }
      }
    }

    if (neg_scale) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < NS; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][i][e] = -s[mt][i][e];
    }
    // Masking (ragged key tail, causal diagonal).
    const bool need_mask = (n0 + BN > Sk) || (p.causal && (n0 + BN - 1 > m0 + diag));
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < NS; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m0 + wrow + mt * 16 + g + ((e >> 1) << 3);
            const int col = n0 + i * 8 + 2 * t + (e & 1);
            int lim = p.causal ? min(Sk - 1, row + diag) : (Sk - 1);
            if (col > lim) s[mt][i][e] = -INFINITY;
          }
    }

    // Online softmax.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < NS; ++i) mx = fmaxf(mx, fmaxf(s[mt][i][2 * hh], s[mt][i][2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mt][hh], mx);
        const float ms = (m_new == -INFINITY) ? 0.f : m_new * sl2;
        const float corr = ex2(m_run[mt][hh] * sl2 - ms);
        m_run[mt][hh] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NS; ++i) {
          float p0 = ex2(fmaf(s[mt][i][2 * hh], sl2, -ms));
          float p1 = ex2(fmaf(s[mt][i][2 * hh + 1], sl2, -ms));
          s[mt][i][2 * hh] = p0;
          s[mt][i][2 * hh + 1] = p1;
          sum += p0 + p1;
        }
        l_run[mt][hh] = l_run[mt][hh] * corr + sum;
#pragma unroll
        for (int i = 0; i < ND; ++i) {
          o[mt][i][2 * hh] *= corr;
          o[mt][i][2 * hh + 1] *= corr;
        }
      }

    // P (bf16) as A fragments.
    uint32_t pa[MT][NS / 2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < NS / 2; ++kk) {
        pa[mt][kk][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][kk][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][kk][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][kk][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }

    if constexpr (STAGES == 2) {
      cp_async_wait<2>();
      __syncthreads();
    } else {
      cp_async_wait<0>();
      __syncthreads();
      if (j + 1 < n_blocks) load_tile<BN, D, NT>(sK, EVK_GK, n0 + BN, Sk, kv_stride, tid);
      cp_async_commit();
    }

    // O += P V
#pragma unroll
    for (int kk = 0; kk < NS / 2; ++kk) {
#pragma unroll
      for (int dn = 0; dn < ND / 2; ++dn) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, qo.at(kk * 16, dn) + (V_FROM_Q + stage_off));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][2 * dn], pa[mt][kk], b0, b1);
          mma_bf16(o[mt][2 * dn + 1], pa[mt][kk], b2, b3);
        }
      }
    }
  }
  cp_async_wait<0>();
#undef EVK_GQ
#undef EVK_GK
#undef EVK_GV

  // Epilogue: normalise, stage this warp's rows through its own Q rows in smem, store 16 B.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = l_run[mt][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int r = wrow + mt * 16 + g + hh * 8;
#pragma unroll
      for (int i = 0; i < ND; ++i) {
        uint32_t v = pack_bf16(o[mt][i][2 * hh] * inv, o[mt][i][2 * hh + 1] * inv);
        uint32_t addr = sQ + swz<D>(r, i * 8) + t * 4;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
      }
    }
  __syncwarp();
  {
    constexpr int CPR = D / 8;
    constexpr int TOTAL = MT * 16 * CPR;
#pragma unroll
    for (int it = 0; it < TOTAL / 32; ++it) {
      int i = it * 32 + lane;
      int r = i / CPR, c = i % CPR;
      uint4 v;
      asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(sQ + swz<D>(wrow + r, c * 8)));
      const int row = m0 + wrow + r;
      if (row < Sq) *reinterpret_cast<uint4*>(EVK_GO + (long)row * q_stride + c * 8) = v;
    }
  }
#undef EVK_GO
}

template <int D, int NW, int MT, int BN, int STAGES, int QREG>
static int launch(const evk_attention_params* p, cudaStream_t stream) {
  constexpr int BM = 16 * MT * NW;
  constexpr size_t smem = (size_t)(BM + 2 * STAGES * BN) * D * 2;
  static_assert(smem <= 227 * 1024, "shared memory over the sm_90 per-block limit");
  static_assert(MT == 1 || MT == 2, "MTILES must be 1 or 2");
  auto kern = attn_fwd_kernel<D, NW, MT, BN, STAGES, (QREG != 0)>;
  static bool attr_done = false;  // once per instantiation
  if (!attr_done) {
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
      return 3;
    attr_done = true;
  }
  const float LOG2E = 1.4426950408889634f;
  float sl2 = fabsf(p->softmax_scale) * LOG2E;
  if (sl2 < 1e-30f) sl2 = 1e-30f;  // keeps -inf * scale = -inf for masked keys
  const bool neg = p->softmax_scale < 0.f;
  dim3 grid((p->seqlen_q + BM - 1) / BM, p->heads_q, p->batch);
  kern<<<grid, NW * 32, smem, stream>>>(*p, sl2, neg);
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}

}  // namespace evk_fa2

extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  if (!p || !p->q || !p->k || !p->v || !p->o) return 1;
  if (p->batch < 0 || p->seqlen_q < 0 || p->seqlen_k < 0 || p->heads_q <= 0 ||
      p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0)
    return 1;
  if (p->heads_q > 65535 || p->batch > 65535) return 1;
  if (!(p->softmax_scale == p->softmax_scale)) return 1;  // NaN scale
  if (p->batch == 0 || p->seqlen_q == 0) return 0;
  switch (p->head_dim) {
    case 64:
      return evk_fa2::launch<64, WARPS_HD64, MTILES_HD64, BLOCK_N_HD64, STAGES_HD64, QREG_HD64>(
          p, stream);
    case 128:
      return evk_fa2::launch<128, WARPS_HD128, MTILES_HD128, BLOCK_N_HD128, STAGES_HD128,
                             QREG_HD128>(p, stream);
    case 256:
      return evk_fa2::launch<256, WARPS_HD256, 1, BLOCK_N_HD256, STAGES_HD256, QREG_HD256>(
          p, stream);
    default:
      return 1;
  }
}
