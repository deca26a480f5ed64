"""`attention-fwd`: forward attention on the GPU, bf16, CUDA (evk_attention.h); speed bar: cuDNN SDPA."""

from __future__ import annotations

from evokernel.builtin_tasks.attention import AttentionTask, Scenario, torch_reference
from evokernel.harness.task import Baseline


def _fa3_grid() -> tuple[Scenario, ...]:
    """FlashAttention-3's benchmark grid: 16k tokens per batch, heads x head_dim = 2048."""
    shapes = [(16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)]
    return tuple(
        Scenario(b, 2048 // d, 2048 // d, s, s, d, causal)
        for d in (64, 128, 256) for causal in (False, True) for b, s in shapes
    )


def _sdpa(backend_name: str, description: str) -> Baseline:
    """PyTorch SDPA with one backend forced; only what SDPA's causal mask means (seqlen_q == seqlen_k)."""

    def prepare(arrays: dict, s: Scenario) -> tuple:  # [b, s, h, d] -> [b, h, s, d], outside the timed region
        return tuple(arrays[name].transpose(1, 2).contiguous() for name in "qkv")

    def run(prepared: tuple, s: Scenario) -> None:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([getattr(SDPBackend, backend_name)]):
            F.scaled_dot_product_attention(*prepared, is_causal=s.causal, scale=s.scale,
                                           enable_gqa=s.heads_q != s.heads_kv)

    return Baseline(run, prepare, supports=lambda s: not (s.causal and s.seqlen_q != s.seqlen_k),
                    description=description)


class AttentionFwd(AttentionTask):
    name = "attention-fwd"
    description = "forward attention, bf16, CUDA (evk_attention.h)"
    language = "cuda"
    header_file = "evk_attention.h"
    original_file = "original.cu"
    dtype = "bfloat16"
    tolerance_floor = 1e-4
    peak_flops = 1.0e15  # H100/H200 dense bf16 is about 0.99e15
    peak_bytes_per_s = 5.0e12  # H200 HBM3e is 4.8e12
    scenario_sets = {
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

    def reference(self, arrays: dict, s: Scenario, precise: bool) -> dict:
        return {"o": torch_reference(arrays["q"], arrays["k"], arrays["v"], s, precise)}

    def baselines(self) -> dict[str, Baseline]:
        return {"cudnn": _sdpa("CUDNN_ATTENTION", "cuDNN's fused attention, called through PyTorch SDPA"),
                "flash": _sdpa("FLASH_ATTENTION", "FlashAttention-2 as built into PyTorch SDPA")}
