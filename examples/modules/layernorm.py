"""LayerNorm over the last dimension, with its weight and bias (a module file in the KernelBench format)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


rows, hidden = 512, 1024


def get_inputs():
    return [torch.randn(rows, hidden)]


def get_init_inputs():
    return [hidden]
