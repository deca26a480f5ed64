#!/usr/bin/env python3
"""The host's share of a sampled check of an attention output, without a GPU: a gathered key and value head
(bf16, as they cross from the device) made float64, then the float64 rows (`attention_rows`, BLAS products).
Two conversions side by side: torch's (`.double()`, which runs on torch's OpenMP threads for a head) and numpy's
(`backends.cuda.host_float64`). Medians over --repeats, in ms.

    python benchmarks/sampled_check_host.py --results experiments/trusted_timing/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from evokernel.builtin_tasks.attention import ROWS_CHECKED, Scenario, attention_rows
from evokernel.harness.backends.cuda import host_float64
from results_entry import append_entry


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--results", type=Path, help="append the figures to this RESULTS.md")
    args = parser.parse_args()
    rows = []
    for head_dim in (64, 128, 256):
        scenario = Scenario(1, 1, 1, args.seqlen, args.seqlen, head_dim, False)
        generator = torch.Generator().manual_seed(head_dim)
        q, k, v = (torch.randn(n, head_dim, generator=generator).to(torch.bfloat16)
                   for n in (ROWS_CHECKED, args.seqlen, args.seqlen))
        picked = list(range(ROWS_CHECKED))

        def check(convert) -> None:
            attention_rows(convert(q), convert(k), convert(v), picked, scenario, scenario.scale)

        by_torch = median_ms(lambda: check(lambda t: t.double().numpy()), args.repeats)
        by_numpy = median_ms(lambda: check(host_float64), args.repeats)
        rows.append((head_dim, by_torch, by_numpy))
    lines = ["| head dim | torch's conversion, ms | numpy's conversion, ms |", "|---|---|---|"]
    lines += [f"| {d} | {t:.2f} | {n:.2f} |" for d, t, n in rows]
    table = "\n".join(lines)
    print(table)
    if args.results:
        facts = [f"Machine: {platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
                 f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}",
                 f"Key and value heads of {args.seqlen} rows, {ROWS_CHECKED} query rows, medians of {args.repeats}"]
        append_entry(args.results, "The host's share of a sampled attention check", facts, table)


if __name__ == "__main__":
    main()
