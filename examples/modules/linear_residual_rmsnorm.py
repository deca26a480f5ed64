"""Linear + residual add + RMSNorm, fused (a module file in the KernelBench format)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.RMSNorm(out_features, eps=1e-6)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x) + residual)


batch, in_features, out_features = 256, 256, 512


def get_inputs():
    return [torch.randn(batch, in_features), torch.randn(batch, out_features)]


def get_init_inputs():
    return [in_features, out_features]
