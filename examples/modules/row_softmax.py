"""Softmax over the last dimension of a [rows, columns] matrix (a module file in the KernelBench format)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


rows, columns = 512, 1024


def get_inputs():
    return [torch.randn(rows, columns)]


def get_init_inputs():
    return []
