"""Forward attention, on the GPU in bf16 (`attention-fwd`) and on the CPU in fp32 (`attention-fwd-cpu`).

The two tasks share the ABI's meaning and scenario coverage (GQA, ragged and unequal lengths,
bottom-right causal masks, custom softmax scales, every head dim); the CPU one uses small shapes
so that the whole harness runs in seconds without a GPU.
"""

from __future__ import annotations

from evokernel.harness.tasks import TASK_DIR, Scenario, Task


def _fa3_grid() -> tuple[Scenario, ...]:
    """FlashAttention-3's benchmark grid: 16k tokens per batch, heads x head_dim = 2048."""
    shapes = [(16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)]
    return tuple(
        Scenario(b, 2048 // d, 2048 // d, s, s, d, causal)
        for d in (64, 128, 256) for causal in (False, True) for b, s in shapes
    )


CUDA_SETS = {
    "quick": (
        Scenario(2, 4, 4, 256, 256, 64, False),
        Scenario(1, 8, 2, 300, 300, 128, True),
        Scenario(2, 2, 1, 77, 190, 256, True),
        Scenario(1, 4, 4, 1, 513, 128, False, 0.3),
        Scenario(1, 2, 2, 200, 130, 64, True),
    ),
    "fa3": _fa3_grid(),
    # One (batch, seqlen) point of the grid for every head dim and mask: quick enough to evaluate
    # many candidates in a search, and it exercises every head-dim specialisation of a kernel.
    "fa3-2k": tuple(s for s in _fa3_grid() if s.seqlen_q == 2048),
    "gqa": (
        Scenario(4, 16, 4, 2048, 2048, 128, False),
        Scenario(4, 16, 2, 2048, 2048, 128, True),
        Scenario(4, 32, 8, 2048, 2048, 64, True),
        Scenario(4, 32, 4, 2048, 2048, 64, False),
        Scenario(2, 8, 2, 2048, 2048, 256, True),
        Scenario(2, 8, 1, 2048, 2048, 256, False),
    ),
    "ragged": (
        Scenario(2, 16, 16, 1000, 1531, 128, True),
        Scenario(2, 16, 16, 1531, 1000, 128, True),
        Scenario(3, 16, 4, 1, 4097, 128, False),
        Scenario(5, 32, 32, 77, 77, 64, True, 0.5),
        Scenario(2, 8, 2, 333, 2049, 256, True),
        Scenario(1, 32, 8, 4097, 4097, 64, False, 0.05),
        Scenario(2, 8, 8, 2049, 191, 256, False),
    ),
}

CPU_SETS = {
    "quick": (
        Scenario(1, 2, 2, 48, 48, 32, False),
        Scenario(1, 4, 2, 33, 57, 16, True, 0.5),
        Scenario(2, 2, 1, 40, 19, 24, True),
    ),
    "grid": tuple(
        Scenario(b, 128 // d, 128 // d, s, s, d, causal)
        for d in (32, 64) for causal in (False, True) for b, s in ((4, 64), (2, 128), (1, 256))
    ),
    "gqa": (
        Scenario(2, 8, 2, 96, 96, 32, True),
        Scenario(1, 8, 1, 128, 128, 64, False),
    ),
    "ragged": (
        Scenario(2, 2, 2, 77, 131, 40, True, 0.3),
        Scenario(1, 4, 2, 100, 37, 32, True),
        Scenario(3, 2, 2, 1, 65, 64, False),
        Scenario(1, 3, 1, 63, 63, 24, False, 1.7),
    ),
}

ATTENTION_FWD = Task(
    name="attention-fwd",
    description="forward attention, bf16, CUDA (evk_attention.h)",
    backend="cuda",
    language="cuda",
    header=TASK_DIR / "attention_fwd" / "evk_attention.h",
    original=TASK_DIR / "attention_fwd" / "original.cu",
    scenario_sets=CUDA_SETS,
    element_size=2,
    peak_flops=1.0e15,  # H100/H200 dense bf16 is about 0.99e15
    peak_bytes_per_s=5.0e12,  # H200 HBM3e is 4.8e12
    tolerance_floor=1e-4,
    library_baselines=("cudnn", "flash"),
)

ATTENTION_FWD_CPU = Task(
    name="attention-fwd-cpu",
    description="forward attention, fp32, C with OpenMP (evk_attention_cpu.h)",
    backend="cpu",
    language="c",
    header=TASK_DIR / "attention_fwd_cpu" / "evk_attention_cpu.h",
    original=TASK_DIR / "attention_fwd_cpu" / "original.c",
    scenario_sets=CPU_SETS,
    element_size=4,
    peak_flops=2.0e12,  # far above what a few CPU cores reach in fp32
    peak_bytes_per_s=1.0e12,
    tolerance_floor=1e-5,
)

TASKS = (ATTENTION_FWD, ATTENTION_FWD_CPU)
