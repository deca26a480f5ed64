// evokernel attention-fwd seed kernel for Hopper (bf16, sm_90a): wgmma, TMA, mbarriers and
// producer/consumer warp specialisation, FlashAttention-3 style.
//
// A work tile is BM = 64 * CONSUMERS query rows of one (batch, head); with PERSISTENT each block
// runs work tiles until none is left. Warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one thread issues TMA loads of each work tile's Q and of its K/V tiles of BLOCK_N keys into a STAGES-deep ring of shared-memory buffers, each guarded by
// a "full" mbarrier (TMA transaction bytes) and an "empty" mbarrier (one arrival per consumer warp).
// Warpgroups 1..CONSUMERS are consumers (setmaxnreg.inc), 64 query rows each: S = Q K^T with wgmma
// (both operands from shared memory, K-major, 128-byte swizzle), online softmax in registers (exp2),
// then O += P V with wgmma, P taken from registers (the accumulator layout of S is the register
// A-operand layout) and V read N-major (transposed) from shared memory. With OVERLAP, the Q K^T of
// tile j+1 and the P V of tile j are in flight while the softmax of tile j+1 runs, and O is rescaled
// between the two issues. With PINGPONG the consumer warpgroups take turns to issue their GEMMs, so
// one's softmax runs beside another's GEMMs. The K/V ring runs
// on across work tiles, and a work tile's Q is released once its last Q K^T is done, so the next
// tile's loads overlap the end of the current one.
//
// Tiles in shared memory are what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B: [rows][64] sub-tiles
// of 128-byte rows (one per 64 columns of the head dim), the 16-byte chunk index XORed with
// (row & 7); every sub-tile is 1024-byte aligned so wgmma descriptors use base offset 0.
// The tensor maps view q/k/v [B, S, H, D] as a 4-D tensor (D, H, S, B): rows past seqlen are
// zero-filled by TMA and masked in the softmax; a row with no visible key writes zeros. A warpgroup
// whose 64 rows all lie outside the sequence (in a partial tile) skips the tile.
//
// Shapes the wgmma path does not cover (seqlen_q < MIN_SEQLEN_Q_WGMMA, seqlen_k == 0, or a tensor
// map the driver refuses) run the FlashAttention-2 style mma.sync kernel at the end of this file;
// when its query blocks are fewer than the multiprocessors (decode-like shapes: one query row, long
// keys) it splits the keys over up to DECODE_SPLITS_MAX blocks per query block and a second kernel
// combines the partial results (workspace from the stream-ordered allocator).
//
// Layout: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], o [B, Sq, Hq, D], contiguous.
// Causal: key j visible to query i iff j <= i + Sk - Sq (bottom-right aligned).
#include "evk_attention.h"
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

// ---------------------------------------------------------------------------------------
// Knobs (per head dim). BM = 64 * CONSUMERS query rows per block.
#define BLOCK_N_HD64 128  // @knob 64,96,128
#define CONSUMERS_HD64 3  // @knob 1,2,3
#define STAGES_HD64 2  // @knob 2,3,4
#define OVERLAP_HD64 1  // @knob 0,1

#define BLOCK_N_HD128 128  // @knob 64,96,128
#define CONSUMERS_HD128 2  // @knob 1,2
#define STAGES_HD128 2  // @knob 2,3
#define OVERLAP_HD128 1  // @knob 0,1

#define BLOCK_N_HD256 80  // @knob 64,80
#define CONSUMERS_HD256 2  // @knob 1,2
#define STAGES_HD256 2  // @knob 2
#define OVERLAP_HD256 1  // @knob 0,1

// Registers the producer warpgroup keeps (setmaxnreg.dec; 24 is the least allowed); the consumers
// share the rest, at most 240 each. Not a knob: more for the producer only takes registers from
// the consumers, and the head dim 256 kernels spill with 8 fewer.
#define PRODUCER_REGS 24
// Causal: a head's work tiles in reverse order of their rows (the longest first), 0 = natural order.
#define CAUSAL_LONGEST_FIRST 1  // @knob 0,1
// Work tiles end at the last query row, so a partial tile (Sq not a multiple of BM) holds the first
// rows, which a causal mask makes the cheapest; 0 = tiles start at row 0 (the partial one is last).
#define TILES_FROM_END 1  // @knob 0,1
// One block per multiprocessor taking work tiles until none is left (the next tile's Q, K and V
// load while the last one finishes), 0 = one block per work tile.
#define PERSISTENT 1  // @knob 0,1
// Ping-pong: the consumer warpgroups take turns to issue their GEMMs (named barriers, round robin),
// so one's softmax runs while another's GEMMs use the tensor cores; 0 = each issues when ready.
#define PINGPONG 1  // @knob 0,1
// Query lengths below this use the mma.sync fallback (decode-like shapes).
#define MIN_SEQLEN_Q_WGMMA 64  // @knob 1,16,64,128
// Most key splits of the fallback when its query blocks leave multiprocessors idle (1 = no split).
#define DECODE_SPLITS_MAX 16  // @knob 1,4,16,64
// ---------------------------------------------------------------------------------------

typedef __nv_bfloat16 bf16;

// Multiprocessors of the current device (persistent grids, key splits).
static int num_sms() {
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
      sms = 132;
  }
  return sms;
}


namespace evk_hop {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
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

// --- mbarriers and TMA ---
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_n(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load4(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                          int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// --- wgmma ---
// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (in 16-byte units), layout type 1 in bits 62-63.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Named barriers (0 is __syncthreads): `threads` counts the threads that sync and those that arrive.
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Keeps the compiler from moving accesses of wgmma accumulators across issue/wait points.
template <int M>
__device__ __forceinline__ void fence_regs(float (&d)[M]) {
#pragma unroll
  for (int i = 0; i < M; ++i) asm volatile("" : "+f"(d[i])::"memory");
}


// --- wgmma m64nNk16 bf16 -> f32 (generated by experiments/attention_hopper/gen_wgmma.py) ---
template <int N>
struct Wg;
template <>
struct Wg<64> {
  static __device__ __forceinline__ void ss(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<80> {
  static __device__ __forceinline__ void ss(float (&d)[40], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[40], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %45, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, {%40, %41, %42, %43}, %44, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<96> {
  static __device__ __forceinline__ void ss(float (&d)[48], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[48], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, %52, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<112> {
  static __device__ __forceinline__ void ss(float (&d)[56], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, %56, %57, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[56], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55}, {%56, %57, %58, %59}, %60, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<128> {
  static __device__ __forceinline__ void ss(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<160> {
  static __device__ __forceinline__ void ss(float (&d)[80], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, %80, %81, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[80], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %85, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, {%80, %81, %82, %83}, %84, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<192> {
  static __device__ __forceinline__ void ss(float (&d)[96], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[96], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, {%96, %97, %98, %99}, %100, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};

template <>
struct Wg<256> {
  static __device__ __forceinline__ void ss(float (&d)[128], uint64_t a, uint64_t b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a), "l"(b), "r"(acc));
  }
  static __device__ __forceinline__ void rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
};


// Register split. The block starts with the launch-bound cap per thread (65536 / threads, rounded
// down to 8: 168 for 2 consumers, 128 for 3); setmaxnreg only moves registers inside that pool, and
// an increase the pool cannot cover never returns. The producer keeps PREG, each consumer warpgroup
// gets an equal share of the rest, at most 240, rounded down to a multiple of 8.
template <int NWG, int PREG>
struct RegSplit {
  static constexpr int entry0 = 65536 / (128 * (NWG + 1)) / 8 * 8;
  static constexpr int entry = entry0 > 240 ? 240 : entry0;
  static constexpr int pool = entry * (NWG + 1);
  static constexpr int c0 = (pool - PREG) / NWG / 8 * 8;
  static constexpr int consumer = c0 > 240 ? 240 : c0;
  static_assert(PREG + NWG * consumer <= pool, "register split over the block's pool");
};

template <int NWG, int PREG>
__device__ __forceinline__ void regs_producer() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PREG));
}
template <int NWG, int PREG>
__device__ __forceinline__ void regs_consumer() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(RegSplit<NWG, PREG>::consumer));
}

template <int D, int BN, int NWG, int STAGES>
struct Layout {
  static constexpr int DC = D / 64;                 // 64-column sub-tiles per row
  static constexpr uint32_t Q_SUB = 64 * 128;       // one warpgroup's 64 rows x 64 columns
  static constexpr uint32_t KV_SUB = BN * 128;      // BN rows x 64 columns
  static constexpr uint32_t KV_TILE = DC * KV_SUB;  // one K or V tile
  static constexpr uint32_t Q_BYTES = NWG * DC * Q_SUB;
  static constexpr uint32_t K_OFF = Q_BYTES;
  static constexpr uint32_t V_OFF = K_OFF + STAGES * KV_TILE;
  static constexpr uint32_t BAR_OFF = V_OFF + STAGES * KV_TILE;
  static constexpr uint32_t BYTES = BAR_OFF + 8 * (2 + 4 * STAGES) + 8;  // barriers, tile index
  static constexpr size_t SMEM = BYTES + 1024;  // room to align the base to 1024
};

// Work tiles of a launch: one (query block, head, batch) each, query blocks fastest so that the blocks
// of one head run side by side and share its keys and values in L2; causal ones longest first inside
// a head. With PERSISTENT a block takes its first tile by its index and the next ones from a
// device-wide counter (blocks that finish early take more); the last block to finish resets it.
__device__ unsigned int tile_counter[2];  // [0] tiles handed out after the first ones, [1] blocks done

template <int D, int BN, int NWG, int STAGES, bool OVERLAP, int PREG>
__global__ void __launch_bounds__((NWG + 1) * 128, 1)
    attn_hopper_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                       const __grid_constant__ CUtensorMap tmV, const evk_attention_params p, float sl2,
                       int neg_scale, int longest_first) {
  using L = Layout<D, BN, NWG, STAGES>;
  constexpr int DC = L::DC;
  constexpr int BM = 64 * NWG;
  constexpr int NS = BN / 8;  // n8 column groups of S
  constexpr int ND = D / 8;   // n8 column groups of O
  static_assert(BN % 16 == 0 && BN <= 256 && D % 64 == 0, "tile shape");

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = base + L::K_OFF, sV = base + L::V_OFF;
  // Q full (TMA bytes, or the producer's arrival alone when no tile is left) and Q empty (one
  // arrival per consumer warp once its last Q K^T is done); the tile index travels in tile_slot.
  const uint32_t bar_q = base + L::BAR_OFF, bar_q_empty = bar_q + 8u;
  const uint32_t tile_slot = bar_q + 8u * (2u + 4u * STAGES);
#define EVK_KFULL(s) (bar_q + 8u * (2u + (uint32_t)(s)))
#define EVK_KEMPTY(s) (bar_q + 8u * (2u + STAGES + (uint32_t)(s)))
#define EVK_VFULL(s) (bar_q + 8u * (2u + 2 * STAGES + (uint32_t)(s)))
#define EVK_VEMPTY(s) (bar_q + 8u * (2u + 3 * STAGES + (uint32_t)(s)))

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const int Sq = p.seqlen_q, Sk = p.seqlen_k;
  const int diag = Sk - Sq;  // key j visible to query i iff j <= i + diag
  const int n_mb = (Sq + BM - 1) / BM;
  const int tiles = n_mb * p.heads_q * p.batch;
  auto tile_rows = [&](int t) {  // first query row of tile t (negative: its first rows lie before 0)
    const int x = longest_first ? n_mb - 1 - (t % n_mb) : t % n_mb;
    return TILES_FROM_END ? Sq - (n_mb - x) * BM : x * BM;
  };
  // Consumer warpgroups whose 64 rows all lie outside the sequence (in a partial tile) skip the tile
  // and the producer arrives for them on the key tiles' barriers.
  auto outside = [&](int m0w) { return m0w + 64 <= 0 || m0w >= Sq; };
  auto key_tiles = [&](int m0) {  // key tiles the query block at m0 sees
    const int n_end = p.causal ? min(Sk, min(m0 + BM, Sq) + diag) : Sk;
    return n_end > 0 ? (n_end + BN - 1) / BN : 0;
  };
  // Ring position of the key tiles: `it` counts the tiles passed through the ring before this work
  // tile, over all the block's work tiles.
  auto stage = [](uint32_t it) { return (int)(it % STAGES); };
  auto phase = [](uint32_t it) { return (uint32_t)((it / STAGES) & 1); };

  if (tid == 0) {
    prefetch_map(&tmQ);
    prefetch_map(&tmK);
    prefetch_map(&tmV);
    mbar_init(bar_q, 1);
    mbar_init(bar_q_empty, NWG * 4);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(EVK_KFULL(s), 1);
      mbar_init(EVK_VFULL(s), 1);
      mbar_init(EVK_KEMPTY(s), NWG * 4);
      mbar_init(EVK_VEMPTY(s), NWG * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------- producer ----------------
    regs_producer<NWG, PREG>();
    if (tid == 0) {
      uint32_t it = 0;
      int t = blockIdx.x;
      for (int k = 0;; ++k) {
        if (k > 0) mbar_wait(bar_q_empty, (uint32_t)((k - 1) & 1));
        if (t >= tiles) {
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile_slot), "r"(-1) : "memory");
          mbar_arrive(bar_q);
          break;
        }
        const int m0 = tile_rows(t), hb = t / n_mb;
        const int h = hb % p.heads_q, b = hb / p.heads_q;
        const int hk = h / (p.heads_q / p.heads_kv);
        const int n_blocks = key_tiles(m0);
        uint32_t idle_warps = 0;  // of consumers that skip the tile, arrived for by the producer
#pragma unroll
        for (int w = 0; w < NWG; ++w) idle_warps += outside(m0 + 64 * w) ? 4u : 0u;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile_slot), "r"(t) : "memory");
        mbar_expect_tx(bar_q, L::Q_BYTES);
#pragma unroll
        for (int w = 0; w < NWG; ++w)
#pragma unroll
          for (int c = 0; c < DC; ++c)
            tma_load4(sQ + (w * DC + c) * L::Q_SUB, &tmQ, bar_q, c * 64, h, m0 + 64 * w, b);
        for (int j = 0; j < n_blocks; ++j, ++it) {
          const int s = stage(it);
          const uint32_t par = phase(it) ^ 1u;
          if (it >= STAGES) mbar_wait(EVK_KEMPTY(s), par);
          mbar_expect_tx(EVK_KFULL(s), L::KV_TILE);
#pragma unroll
          for (int c = 0; c < DC; ++c)
            tma_load4(sK + s * L::KV_TILE + c * L::KV_SUB, &tmK, EVK_KFULL(s), c * 64, hk, j * BN, b);
          if (idle_warps) mbar_arrive_n(EVK_KEMPTY(s), idle_warps);  // after the wait: this use's phase
          if (it >= STAGES) mbar_wait(EVK_VEMPTY(s), par);
          mbar_expect_tx(EVK_VFULL(s), L::KV_TILE);
#pragma unroll
          for (int c = 0; c < DC; ++c)
            tma_load4(sV + s * L::KV_TILE + c * L::KV_SUB, &tmV, EVK_VFULL(s), c * 64, hk, j * BN, b);
          if (idle_warps) mbar_arrive_n(EVK_VEMPTY(s), idle_warps);
        }
        t = PERSISTENT ? (int)(gridDim.x + atomicAdd(&tile_counter[0], 1u)) : tiles;
      }
      if (PERSISTENT) {
        __threadfence();  // this block's last fetch before its count
        if (atomicAdd(&tile_counter[1], 1u) == gridDim.x - 1) {
          __threadfence();
          atomicExch(&tile_counter[0], 0u);
          atomicExch(&tile_counter[1], 0u);
        }
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  regs_consumer<NWG, PREG>();
  const int cw = wg - 1;
  const int wtid = tid & 127, warp4 = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const long q_stride = (long)p.heads_q * D;
  const uint32_t sQw = sQ + cw * DC * L::Q_SUB;
  auto release_q = [&]() {
    if (lane == 0) mbar_arrive(bar_q_empty);
  };
  // Ping-pong turns: warpgroup cw issues a group of GEMMs once warpgroup cw - 1 has issued its own
  // (barrier 1 + cw), then hands the turn on. Every warpgroup of a work tile takes the same number of
  // turns (one per group below, also when it skips the tile), so the round robin never loses step.
  constexpr bool PP = PINGPONG && NWG >= 2;
  auto turn_wait = [&]() {
    if constexpr (PP) named_sync(1u + cw, 256u);
  };
  auto turn_pass = [&]() {
    if constexpr (PP) named_arrive(1u + (cw + 1) % NWG, 256u);
  };
  if (PP && cw == NWG - 1) turn_pass();  // the first turn is warpgroup 0's

  uint32_t it = 0;
  for (int k = 0;; ++k) {
    mbar_wait(bar_q, (uint32_t)(k & 1));
    int tile;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(tile) : "r"(tile_slot) : "memory");
    if (tile < 0) break;
    const int m0 = tile_rows(tile), m0w = m0 + 64 * cw;  // the tile's first row, this warpgroup's
    const int n_blocks = key_tiles(m0);
    // Made where they are used from the tile index: kept live over the main loop they would take
    // registers the loop needs.
    auto out_rows = [&]() {
      const int hb = tile / n_mb;
      return (bf16*)p.o + ((long)(hb / p.heads_q) * Sq * p.heads_q + hb % p.heads_q) * D;
    };

    // A skipped tile (see `outside`), or causal rows that see no key (zeros written). The vote makes
    // the branch warp-uniform to ptxas; a branch it cannot prove uniform serialises every wgmma (C7520).
    const bool skip = __all_sync(0xffffffffu, outside(m0w));
    if (skip || n_blocks == 0) {
      release_q();
      it += n_blocks;
      const int turns = n_blocks == 0 ? 0 : OVERLAP ? n_blocks + 1 : 2 * n_blocks;
      for (int i = 0; i < turns && PP; ++i) {
        turn_wait();
        turn_pass();
      }
      bf16* const gO = out_rows();
      for (int i = wtid; i < 64 * (D / 8) && !skip; i += 128) {
        const int r = i / (D / 8), c = i % (D / 8);
        if (m0w + r >= 0 && m0w + r < Sq)
          *reinterpret_cast<uint4*>(gO + (long)(m0w + r) * q_stride + c * 8) = make_uint4(0, 0, 0, 0);
      }
      continue;
    }

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    float sacc[BN / 2];
    uint32_t pa[BN / 16][4];

    // S = Q K^T for tile j (issue only).
    auto issue_qk = [&](int j) {
      const uint32_t kb = sK + stage(it + j) * L::KV_TILE;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (uint32_t)((kk & 3) << 5);  // 16 columns = 32 bytes
        const uint64_t da = make_desc(sQw + (kk >> 2) * L::Q_SUB + off, 16, 1024);
        const uint64_t db = make_desc(kb + (kk >> 2) * L::KV_SUB + off, 16, 1024);
        Wg<BN>::ss(sacc, da, db, kk > 0 ? 1 : 0);
      }
    };
    // O += P V for tile j (issue only).
    auto issue_pv = [&](int j) {
      const uint32_t vb = sV + stage(it + j) * L::KV_TILE;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        const uint64_t db = make_desc(vb + kk * 2048, L::KV_SUB, 1024);
        Wg<D>::rs(o, pa[kk], db);
      }
    };
    // Mask, online softmax of sacc for tile j; returns the per-row-half correction of O.
    auto softmax = [&](int j, float (&corr)[2]) {
      const int n0 = j * BN;
      if (neg_scale) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sacc[i] = -sacc[i];
      }
      const bool need_mask = (n0 + BN > Sk) || (p.causal && (n0 + BN - 1 > m0w + diag));
      if (need_mask) {
#pragma unroll
        for (int i = 0; i < NS; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m0w + warp4 * 16 + g + ((e >> 1) << 3);
            const int col = n0 + i * 8 + 2 * t + (e & 1);
            const int lim = p.causal ? min(Sk - 1, row + diag) : (Sk - 1);
            if (col > lim) sacc[i * 4 + e] = -INFINITY;
          }
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < NS; ++i) mx = fmaxf(mx, fmaxf(sacc[i * 4 + 2 * hh], sacc[i * 4 + 2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[hh], mx);
        const float ms = (m_new == -INFINITY) ? 0.f : m_new * sl2;
        corr[hh] = ex2(m_run[hh] * sl2 - ms);
        m_run[hh] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < NS; ++i) {
          const float p0 = ex2(fmaf(sacc[i * 4 + 2 * hh], sl2, -ms));
          const float p1 = ex2(fmaf(sacc[i * 4 + 2 * hh + 1], sl2, -ms));
          sacc[i * 4 + 2 * hh] = p0;
          sacc[i * 4 + 2 * hh + 1] = p1;
          sum += p0 + p1;
        }
        l_run[hh] = l_run[hh] * corr[hh] + sum;
      }
    };
    auto rescale_o = [&](const float (&corr)[2]) {
#pragma unroll
      for (int i = 0; i < ND; ++i) {
        o[i * 4 + 0] *= corr[0];
        o[i * 4 + 1] *= corr[0];
        o[i * 4 + 2] *= corr[1];
        o[i * 4 + 3] *= corr[1];
      }
    };
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        pa[kk][0] = pack_bf16(sacc[(2 * kk) * 4 + 0], sacc[(2 * kk) * 4 + 1]);
        pa[kk][1] = pack_bf16(sacc[(2 * kk) * 4 + 2], sacc[(2 * kk) * 4 + 3]);
        pa[kk][2] = pack_bf16(sacc[(2 * kk + 1) * 4 + 0], sacc[(2 * kk + 1) * 4 + 1]);
        pa[kk][3] = pack_bf16(sacc[(2 * kk + 1) * 4 + 2], sacc[(2 * kk + 1) * 4 + 3]);
      }
    };

    if constexpr (OVERLAP) {
      // Prologue: S_0, softmax_0. corr holds the last softmax's correction of O, applied while the
      // next Q K^T runs, before the P V it precedes.
      float corr[2];
      mbar_wait(EVK_KFULL(stage(it)), phase(it));
      turn_wait();
      wg_fence();
      issue_qk(0);
      wg_commit();
      turn_pass();
      wg_wait<0>();
      fence_regs(sacc);
      if (lane == 0) mbar_arrive(EVK_KEMPTY(stage(it)));
      if (n_blocks == 1) release_q();
      softmax(0, corr);
      pack_p();
      for (int j = 1; j < n_blocks; ++j) {
        const int s = stage(it + j), sp = stage(it + j - 1);
        mbar_wait(EVK_KFULL(s), phase(it + j));
        turn_wait();
        fence_regs(sacc);
        fence_regs(o);
        wg_fence();
        issue_qk(j);
        wg_commit();
        rescale_o(corr);
        fence_regs(o);
        mbar_wait(EVK_VFULL(sp), phase(it + j - 1));
        wg_fence();
        issue_pv(j - 1);
        wg_commit();
        turn_pass();
        wg_wait<1>();
        fence_regs(sacc);
        if (lane == 0) mbar_arrive(EVK_KEMPTY(s));
        if (j == n_blocks - 1) release_q();
        softmax(j, corr);
        wg_wait<0>();
        fence_regs(o);
        if (lane == 0) mbar_arrive(EVK_VEMPTY(sp));
        pack_p();
      }
      {
        const int s = stage(it + n_blocks - 1);
        mbar_wait(EVK_VFULL(s), phase(it + n_blocks - 1));
        rescale_o(corr);
        turn_wait();
        fence_regs(o);
        wg_fence();
        issue_pv(n_blocks - 1);
        wg_commit();
        turn_pass();
        wg_wait<0>();
        fence_regs(o);
        if (lane == 0) mbar_arrive(EVK_VEMPTY(s));
      }
    } else {
      for (int j = 0; j < n_blocks; ++j) {
        const int s = stage(it + j);
        const uint32_t par = phase(it + j);
        mbar_wait(EVK_KFULL(s), par);
        turn_wait();
        fence_regs(sacc);
        wg_fence();
        issue_qk(j);
        wg_commit();
        turn_pass();
        wg_wait<0>();
        fence_regs(sacc);
        if (lane == 0) mbar_arrive(EVK_KEMPTY(s));
        if (j == n_blocks - 1) release_q();
        float corr[2];
        softmax(j, corr);
        rescale_o(corr);
        pack_p();
        mbar_wait(EVK_VFULL(s), par);
        turn_wait();
        fence_regs(o);
        wg_fence();
        issue_pv(j);
        wg_commit();
        turn_pass();
        wg_wait<0>();
        fence_regs(o);
        if (lane == 0) mbar_arrive(EVK_VEMPTY(s));
      }
    }
    it += n_blocks;

    // Epilogue: normalise and store straight from registers (Q's buffer may already hold the next
    // tile's rows). The four threads of a quad hold two columns each of every 8-column group; a 4x4
    // exchange of 32-bit words gives each thread a whole group, stored as 16 bytes.
    const int quad = lane & ~3;
    bf16* const gO = out_rows();
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = l_run[hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int row = m0w + warp4 * 16 + g + hh * 8;
#pragma unroll
      for (int c4 = 0; c4 < ND / 4; ++c4) {
        uint32_t w[4], out[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int q = 0; q < 4; ++q)
          w[q] = pack_bf16(o[(4 * c4 + q) * 4 + 2 * hh] * inv, o[(4 * c4 + q) * 4 + 2 * hh + 1] * inv);
        // Round r: thread t takes from thread (t + r) & 3 that thread's word for group t.
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int send = (t - r) & 3, from = (t + r) & 3;
          const uint32_t mine = send == 0 ? w[0] : send == 1 ? w[1] : send == 2 ? w[2] : w[3];
          const uint32_t v = __shfl_sync(0xffffffffu, mine, quad | from);
#pragma unroll
          for (int q = 0; q < 4; ++q) out[q] = from == q ? v : out[q];
        }
        if (row >= 0 && row < Sq)
          *reinterpret_cast<uint4*>(gO + (long)row * q_stride + (4 * c4 + t) * 8) =
              make_uint4(out[0], out[1], out[2], out[3]);
      }
    }
  }
#undef EVK_KFULL
#undef EVK_KEMPTY
#undef EVK_VFULL
#undef EVK_VEMPTY
}

// --- host side: tensor maps through the driver entry point the runtime exposes ---
typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                  CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                  CUtensorMapFloatOOBfill);

static EncodeTiledFn encode_fn() {
  static EncodeTiledFn fn = nullptr;
  static bool tried = false;
  if (!tried) {
    tried = true;
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &status) == cudaSuccess &&
        status == cudaDriverEntryPointSuccess)
      fn = (EncodeTiledFn)ptr;
  }
  return fn;
}

// A [B, S, H, D] bf16 tensor as (D, H, S, B), boxes of 64 columns x `rows` rows, 128-byte swizzle.
static bool make_map(CUtensorMap* map, const void* ptr, int batch, int seqlen, int heads, int D,
                     int rows) {
  EncodeTiledFn fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)heads, (cuuint64_t)seqlen, (cuuint64_t)batch};
  cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)heads * D * 2,
                           (cuuint64_t)seqlen * heads * D * 2};
  cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(ptr), dims, strides, box, estr,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Returns 0 on success, -1 when this path cannot run the shape (the caller falls back), >0 errors.
template <int D, int BN, int NWG, int STAGES, int OVERLAP>
static int launch(const evk_attention_params* p, cudaStream_t stream) {
  using L = Layout<D, BN, NWG, STAGES>;
  static_assert(L::SMEM <= 227 * 1024, "shared memory over the sm_90 per-block limit");
  static_assert(NWG >= 1 && NWG <= 3, "1 to 3 consumer warpgroups");
  static_assert(RegSplit<NWG, PRODUCER_REGS>::consumer >= 128, "too few registers for the consumers");
  CUtensorMap mq, mk, mv;
  if (((uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)p->v) & 15) return -1;
  if (!make_map(&mq, p->q, p->batch, p->seqlen_q, p->heads_q, D, 64) ||
      !make_map(&mk, p->k, p->batch, p->seqlen_k, p->heads_kv, D, BN) ||
      !make_map(&mv, p->v, p->batch, p->seqlen_k, p->heads_kv, D, BN))
    return -1;
  auto kern = attn_hopper_kernel<D, BN, NWG, STAGES, (OVERLAP != 0), PRODUCER_REGS>;
  static bool attr_done = false;  // once per instantiation
  if (!attr_done) {
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::SMEM) !=
        cudaSuccess)
      return 3;
    attr_done = true;
  }
  const float LOG2E = 1.4426950408889634f;
  float sl2 = fabsf(p->softmax_scale) * LOG2E;
  if (sl2 < 1e-30f) sl2 = 1e-30f;  // keeps -inf * scale = -inf for masked keys
  const int neg = p->softmax_scale < 0.f ? 1 : 0;
  const long tiles = (long)((p->seqlen_q + 64 * NWG - 1) / (64 * NWG)) * p->heads_q * p->batch;
  if (tiles > 0x7fffffffL) return -1;
  const int grid = PERSISTENT ? (int)min(tiles, (long)num_sms()) : (int)tiles;
  kern<<<grid, (NWG + 1) * 128, L::SMEM, stream>>>(mq, mk, mv, *p, sl2, neg,
                                                    (p->causal && CAUSAL_LONGEST_FIRST) ? 1 : 0);
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}

}  // namespace evk_hop


// ---------------------------------------------------------------------------------------
// Fallback: the FlashAttention-2 style mma.sync kernel of attention_fa2.cu (64-row blocks here),
// with a key split for decode-like shapes, for the shapes the wgmma path does not take.
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

// SPLIT: grid.x holds (query block, key split) pairs; split s takes key blocks
// [s * split_blocks, (s + 1) * split_blocks) and writes its normalised fp32 partial output and its
// log2-sum-exp to ws_o / ws_lse (combined by combine_splits).
template <int D, int NW, int MT, int BN, int STAGES, bool QREG, bool SPLIT>
__global__ void __launch_bounds__(NW * 32)
    attn_fwd_kernel(const evk_attention_params p, float sl2, bool neg_scale, int split_blocks,
                    float* ws_o, float* ws_lse) {
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
  const int num_splits = SPLIT ? (p.seqlen_k + split_blocks * BN - 1) / (split_blocks * BN) : 1;
  const int num_mb = (int)gridDim.x / num_splits;
  const int bx = SPLIT ? (int)blockIdx.x % num_mb : (int)blockIdx.x;
  const int split = SPLIT ? (int)blockIdx.x / num_mb : 0;
  const int mb = p.causal ? (num_mb - 1 - bx) : bx;
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
  const int n_all = n_end > 0 ? (n_end + BN - 1) / BN : 0;
  const int j_begin = SPLIT ? split * split_blocks : 0;
  const int n_blocks = SPLIT ? min(n_all, j_begin + split_blocks) : n_all;  // one past the last

  if constexpr (SPLIT) {
    if (n_blocks <= j_begin) {  // no visible key in this split: weight zero in the combination
      const long rows = (long)p.batch * Sq * p.heads_q;
      for (int r = tid; r < BM; r += NT) {
        if (m0 + r >= Sq) continue;
        const long rid = ((long)blockIdx.z * Sq + m0 + r) * p.heads_q + blockIdx.y;
        ws_lse[split * rows + rid] = -INFINITY;
        for (int c = 0; c < D; ++c) ws_o[(split * rows + rid) * D + c] = 0.f;
      }
      return;
    }
  }
  if (n_blocks <= j_begin) {
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
  load_tile<BN, D, NT>(sK, EVK_GK, j_begin * BN, Sk, kv_stride, tid);
  cp_async_commit();
  if constexpr (STAGES == 2) {
    load_tile<BN, D, NT>(sV, EVK_GV, j_begin * BN, Sk, kv_stride, tid);
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

  for (int j = j_begin; j < n_blocks; ++j) {
    const int n0 = j * BN;
    const int jj = j - j_begin;  // stage parity
    uint32_t stage_off;  // byte offset of this iteration's K/V stage
    if constexpr (STAGES == 2) {
      cp_async_wait<1>();
      __syncthreads();
      if (j + 1 < n_blocks) {
        load_tile<BN, D, NT>(sK + ((jj + 1) & 1) * BN * D * 2, EVK_GK, n0 + BN, Sk, kv_stride, tid);
      }
      cp_async_commit();
      if (j + 1 < n_blocks) {
        load_tile<BN, D, NT>(sV + ((jj + 1) & 1) * BN * D * 2, EVK_GV, n0 + BN, Sk, kv_stride, tid);
      }
      cp_async_commit();
      stage_off = (jj & 1) * (BN * D * 2);
    } else {
      cp_async_wait<0>();
      __syncthreads();
      load_tile<BN, D, NT>(sV, EVK_GV, n0, Sk, kv_stride, tid);
      cp_async_commit();
      stage_off = 0;
    }
    if constexpr (QREG) {
      if (j == j_begin) {
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

  if constexpr (SPLIT) {
    const long rows = (long)p.batch * Sq * p.heads_q;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float l = l_run[mt][hh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int row = m0 + wrow + mt * 16 + g + hh * 8;
        if (row >= Sq) continue;
        const long rid = ((long)blockIdx.z * Sq + row) * p.heads_q + blockIdx.y;
        float* dst = ws_o + (split * rows + rid) * D;
#pragma unroll
        for (int i = 0; i < ND; ++i)
          *reinterpret_cast<float2*>(dst + i * 8 + 2 * t) =
              make_float2(o[mt][i][2 * hh] * inv, o[mt][i][2 * hh + 1] * inv);
        if (t == 0) ws_lse[split * rows + rid] = l > 0.f ? m_run[mt][hh] * sl2 + __log2f(l) : -INFINITY;
      }
  } else {
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
  }  // SPLIT
#undef EVK_GO
}

// Combination of the key splits: one warp per output row, weights 2^(lse_s - max).
template <int D>
__global__ void __launch_bounds__(128) combine_splits(const float* ws_o, const float* ws_lse, bf16* out,
                                                      long rows, int splits) {
  const long rid = (long)blockIdx.x * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (rid >= rows) return;
  float mx = -INFINITY;
  for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, ws_lse[s * rows + rid]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  constexpr int PER = D / 32;  // columns per lane
  float acc[PER];
#pragma unroll
  for (int c = 0; c < PER; ++c) acc[c] = 0.f;
  float wsum = 0.f;
  if (mx != -INFINITY) {
    for (int s = 0; s < splits; ++s) {
      const float lse = ws_lse[s * rows + rid];
      if (lse == -INFINITY) continue;
      const float w = ex2(lse - mx);
      wsum += w;
      const float* src = ws_o + (s * rows + rid) * D + lane * PER;
#pragma unroll
      for (int c = 0; c < PER; ++c) acc[c] = fmaf(w, src[c], acc[c]);
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
#pragma unroll
  for (int c = 0; c < PER; c += 2)
    *reinterpret_cast<uint32_t*>(out + rid * D + lane * PER + c) = pack_bf16(acc[c] * inv, acc[c + 1] * inv);
}

template <int D, int NW, int MT, int BN, int STAGES, int QREG>
static int launch(const evk_attention_params* p, cudaStream_t stream) {
  constexpr int BM = 16 * MT * NW;
  constexpr size_t smem = (size_t)(BM + 2 * STAGES * BN) * D * 2;
  static_assert(smem <= 227 * 1024, "shared memory over the sm_90 per-block limit");
  static_assert(MT == 1 || MT == 2, "MTILES must be 1 or 2");
  const float LOG2E = 1.4426950408889634f;
  float sl2 = fabsf(p->softmax_scale) * LOG2E;
  if (sl2 < 1e-30f) sl2 = 1e-30f;  // keeps -inf * scale = -inf for masked keys
  const bool neg = p->softmax_scale < 0.f;
  const int num_mb = (p->seqlen_q + BM - 1) / BM;
  const long blocks = (long)num_mb * p->heads_q * p->batch;
  const int key_blocks = (p->seqlen_k + BN - 1) / BN;
  // Split the keys when the query blocks alone leave the multiprocessors idle (decode-like shapes).
  int splits = 1;
  if (DECODE_SPLITS_MAX > 1 && blocks < num_sms() && key_blocks > 1) {
    splits = (int)min((long)DECODE_SPLITS_MAX, (2L * num_sms() + blocks - 1) / blocks);
    splits = min(splits, key_blocks);
  }
  const int split_blocks = (key_blocks + splits - 1) / max(splits, 1);
  splits = split_blocks > 0 ? (key_blocks + split_blocks - 1) / split_blocks : 1;
  if (splits > 1) {
    auto kern = attn_fwd_kernel<D, NW, MT, BN, STAGES, (QREG != 0), true>;
    static bool attr_done = false;  // once per instantiation
    if (!attr_done) {
      if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return 3;
      attr_done = true;
    }
    const long rows = (long)p->batch * p->seqlen_q * p->heads_q;
    void* ws = nullptr;
    if (cudaMallocAsync(&ws, (size_t)splits * rows * (D + 1) * sizeof(float), stream) != cudaSuccess) return 5;
    float* ws_o = (float*)ws;
    float* ws_lse = ws_o + (size_t)splits * rows * D;
    dim3 grid(num_mb * splits, p->heads_q, p->batch);
    kern<<<grid, NW * 32, smem, stream>>>(*p, sl2, neg, split_blocks, ws_o, ws_lse);
    combine_splits<D><<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(ws_o, ws_lse, (bf16*)p->o, rows, splits);
    const bool ok = cudaGetLastError() == cudaSuccess;
    if (cudaFreeAsync(ws, stream) != cudaSuccess || !ok) return 4;
    return 0;
  }
  auto kern = attn_fwd_kernel<D, NW, MT, BN, STAGES, (QREG != 0), false>;
  static bool attr_done = false;  // once per instantiation
  if (!attr_done) {
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
      return 3;
    attr_done = true;
  }
  dim3 grid(num_mb, p->heads_q, p->batch);
  kern<<<grid, NW * 32, smem, stream>>>(*p, sl2, neg, 0, nullptr, nullptr);
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
  if (p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256) return 1;
  if (p->batch == 0 || p->seqlen_q == 0) return 0;
  if (p->seqlen_q >= MIN_SEQLEN_Q_WGMMA && p->seqlen_k > 0) {
    int rc = -1;
    switch (p->head_dim) {
      case 64:
        rc = evk_hop::launch<64, BLOCK_N_HD64, CONSUMERS_HD64, STAGES_HD64, OVERLAP_HD64>(p, stream);
        break;
      case 128:
        rc = evk_hop::launch<128, BLOCK_N_HD128, CONSUMERS_HD128, STAGES_HD128, OVERLAP_HD128>(p, stream);
        break;
      case 256:
        rc = evk_hop::launch<256, BLOCK_N_HD256, CONSUMERS_HD256, STAGES_HD256, OVERLAP_HD256>(p, stream);
        break;
    }
    if (rc >= 0) return rc;
  }
  // 64 query rows per block (4 warps, one m16 tile each): the fallback serves short queries.
  switch (p->head_dim) {
    case 64:
      return evk_fa2::launch<64, 4, 1, 64, 2, 1>(p, stream);
    case 128:
      return evk_fa2::launch<128, 4, 1, 64, 2, 0>(p, stream);
    default:
      return evk_fa2::launch<256, 4, 1, 64, 2, 0>(p, stream);
  }
}
