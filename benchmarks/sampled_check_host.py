#!/usr/bin/env python3
"""The host's share of a sampled check of an attention output, without a GPU: a gathered key and value head
(bf16, as they cross from the device) made float64, then the float64 rows (`attention_rows`, BLAS products).
Variants side by side, each in a process of its own (threads one starts spin on after it and would slow the
next): torch's `.double()` (on its OpenMP threads for a head), the same with one torch thread, numpy's (the bf16
bits shifted into float32s), and torch's beside a one-thread BLAS (OPENBLAS_NUM_THREADS=1 for the process: the
rows' products and torch's threads then cannot spin against each other). On the H200's host a sampled check of a d128 or d256 head took 16 ms
against 1.5 ms for d64 (trusted_timing/RESULTS.md): this says on any machine which conversion avoids it.
Medians over --repeats, in ms.

    python benchmarks/sampled_check_host.py --results experiments/trusted_timing/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from evokernel.builtin_tasks.attention import ROWS_CHECKED, Scenario, attention_rows
from results_entry import append_entry


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - started))
    return statistics.median(times)


def by_numpy(values: torch.Tensor) -> np.ndarray:
    """bf16 to float64 without torch: its bits are the upper half of a float32's."""
    return (values.view(torch.int16).numpy().view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)


CONVERSIONS = {"torch": lambda t: t.double().numpy(), "torch, 1 thread": lambda t: t.double().numpy(),
               "numpy": by_numpy, "torch, BLAS 1 thread": lambda t: t.double().numpy()}
ENVIRONMENTS = {"torch, BLAS 1 thread": {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}}


def measure(conversion: str, head_dims: list[int], seqlen: int, repeats: int) -> list[float]:
    """Median ms of a sampled check's host share per head dim, converting gathered heads by `conversion`."""
    convert, medians = CONVERSIONS[conversion], []
    if conversion == "torch, 1 thread":
        torch.set_num_threads(1)
    for head_dim in head_dims:
        scenario = Scenario(1, 1, 1, seqlen, seqlen, head_dim, False)
        generator = torch.Generator().manual_seed(head_dim)
        q, k, v = (torch.randn(n, head_dim, generator=generator).to(torch.bfloat16)
                   for n in (ROWS_CHECKED, seqlen, seqlen))
        picked = list(range(ROWS_CHECKED))
        medians.append(median_ms(lambda: attention_rows(convert(q), convert(k), convert(v), picked, scenario,
                                                        scenario.scale), repeats))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--results", type=Path, help="append the figures to this RESULTS.md")
    parser.add_argument("--conversion", choices=sorted(CONVERSIONS), help=argparse.SUPPRESS)  # one process's share
    args = parser.parse_args()
    head_dims = [64, 128, 256]
    if args.conversion:
        print(" ".join(f"{ms:.4f}" for ms in measure(args.conversion, head_dims, args.seqlen, args.repeats)))
        return
    columns = {}
    for conversion in CONVERSIONS:
        out = subprocess.run([sys.executable, __file__, "--conversion", conversion, "--repeats", str(args.repeats),
                              "--seqlen", str(args.seqlen)], capture_output=True, text=True, check=True,
                             env={**os.environ, **ENVIRONMENTS.get(conversion, {})}).stdout
        columns[conversion] = [float(x) for x in out.split()]
    lines = ["| head dim | " + " | ".join(f"{name}, ms" for name in CONVERSIONS) + " |",
             "|---" * (1 + len(CONVERSIONS)) + "|"]
    lines += [f"| {d} | " + " | ".join(f"{columns[name][i]:.2f}" for name in CONVERSIONS) + " |"
              for i, d in enumerate(head_dims)]
    table = "\n".join(lines)
    print(table)
    if args.results:
        facts = [f"Machine: {platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
                 f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}",
                 f"Key and value heads of {args.seqlen} rows, {ROWS_CHECKED} query rows, medians of {args.repeats}, "
                 "each conversion in a process of its own"]
        append_entry(args.results, "The host's share of a sampled attention check", facts, table)


if __name__ == "__main__":
    main()
