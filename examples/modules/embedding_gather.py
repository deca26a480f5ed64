"""Token embedding: rows of a table gathered by index, scaled, plus a position term (a module file in the
KernelBench format, with an integer input). `index_ranges` gives the index input's range: every value a check
draws is a row of the table."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, vocabulary: int, dim: int):
        super().__init__()
        self.table = nn.Embedding(vocabulary, dim)
        self.scale = dim ** 0.5

    def forward(self, index: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        return self.table(index) * self.scale + position


batch, tokens, vocabulary, dim = 64, 16, 1000, 256
index_ranges = {"index": vocabulary}


def get_inputs():
    return [torch.randint(0, vocabulary, (batch, tokens)), torch.randn(batch, tokens, dim)]


def get_init_inputs():
    return [vocabulary, dim]
