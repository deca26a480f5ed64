"""Prints the wgmma wrapper specialisations used by evokernel/builtin_tasks/attention_fwd/seeds/attention_hopper.cu.

Each N gets `ss` (A and B from shared memory, both K-major: S = Q K^T) and `rs` (A from registers,
B from shared memory N-major: O += P V). Run: python experiments/attention_hopper/gen_wgmma.py
"""

NS = (64, 80, 96, 112, 128, 160, 192, 256)


def regs(n):
    return ", ".join(f"%{i}" for i in range(n))


def outs(n):
    return ", ".join(f'"+f"(d[{i}])' for i in range(n))


def spec(n):
    m = n // 2
    return f"""template <>
struct Wg<{n}> {{
  static __device__ __forceinline__ void ss(float (&d)[{m}], uint64_t a, uint64_t b, int acc) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{m + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs(m)}}}, %{m}, %{m + 1}, p, 1, 1, 0, 0;\\n}}\\n"
        : {outs(m)}
        : "l"(a), "l"(b), "r"(acc));
  }}
  static __device__ __forceinline__ void rs(float (&d)[{m}], const uint32_t (&a)[4], uint64_t b) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{m + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs(m)}}}, {{%{m}, %{m + 1}, %{m + 2}, %{m + 3}}}, %{m + 4}, p, 1, 1, 1;\\n}}\\n"
        : {outs(m)}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }}
}};
"""


if __name__ == "__main__":
    print("template <int N>\nstruct Wg;")
    for n in NS:
        print(spec(n))
