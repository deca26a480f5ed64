#!/usr/bin/env python3
"""What the worker's checks of timed outputs cost on the GPU, piece by piece, on `attention-fwd` scenarios
(an honest output written into the buffers first): the fault read of a request, one sampled check (its
gathers and its float64 rows), one full check (references and comparisons). Each piece's median over
--repeats, in ms; variants of a piece side by side where a cheaper way is being weighed.

    python experiments/trusted_timing/check_costs.py --scenarios fa3-2k --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from evokernel.builtin_tasks.attention import torch_reference
from evokernel.harness import get_task
from evokernel.harness.backends.cuda import Backend
from evokernel.harness.task import sampled_elements


def timed_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - started))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="attention-fwd")
    parser.add_argument("--scenarios", default="fa3-2k")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4, help="calls in the request whose faults are read")
    args = parser.parse_args()
    task, backend = get_task(args.task), Backend()
    rows = []
    for scenario in task.scenarios(args.scenarios):
        inputs = backend.make_inputs(task.arguments(scenario), scenario, 7, "normal", task.dtype)
        q, k, v = (inputs.arrays[n] for n in "qkv")
        inputs.arrays["o"].copy_(torch_reference(q, k, v, scenario, False))
        requests = [inputs] + [backend.like(inputs) for _ in range(args.batch - 1)]
        picks = sampled_elements(task, scenario, 7, (0, 0, 0))

        def sample(fetch) -> None:
            expected = task.reference_at(scenario, picks, fetch)
            got = {name: fetch(name, flat) for name, flat in picks.items()}
            assert all(np.max(np.abs(got[n] - expected[n])) < 0.05 for n in picks)

        def converted_on_host(name, flat):  # bf16 to the host, float64 made there (torch's CPU threads)
            index = torch.as_tensor(np.asarray(flat, dtype=np.int64), device="cuda")
            return inputs.arrays[name].reshape(-1)[index].cpu().double().numpy()

        def converted_on_device(name, flat):  # float64 made on the device: 4x the bytes cross
            index = torch.as_tensor(np.asarray(flat, dtype=np.int64), device="cuda")
            return inputs.arrays[name].reshape(-1)[index].double().cpu().numpy()

        def on_backend(name, flat):
            return backend.gather(inputs.arrays[name], flat)

        outputs = {"o": inputs.arrays["o"]}
        precise = {}

        def references(both: bool) -> None:
            precise["o"] = task.reference(inputs.inputs(), scenario, True)["o"]
            if both:
                task.reference(inputs.inputs(), scenario, False)

        def compare() -> None:
            backend.max_abs_diff(outputs["o"], precise["o"])
            backend.relative_error(outputs["o"], precise["o"])

        references(False)
        head_q = np.random.default_rng(0).standard_normal((2, scenario.head_dim))
        head_k = np.random.default_rng(1).standard_normal((scenario.seqlen_k, scenario.head_dim))
        row = {"scenario": scenario.name,
               "rows q@k.T (BLAS)": timed_ms(lambda: head_q @ head_k.T, args.repeats),
               "rows q@k.T (einsum)": timed_ms(lambda: np.einsum("rd,kd->rk", head_q, head_k), args.repeats),
               f"faults x{args.batch}": timed_ms(lambda: backend.faults(requests), args.repeats),
               "sample (float64 on host)": timed_ms(lambda: sample(converted_on_host), args.repeats),
               "sample (float64 on device)": timed_ms(lambda: sample(converted_on_device), args.repeats),
               "sample (backend)": timed_ms(lambda: sample(on_backend), args.repeats),
               "sample (float64 on host) again": timed_ms(lambda: sample(converted_on_host), args.repeats),
               "precise ref": timed_ms(lambda: references(False), args.repeats),
               "both refs": timed_ms(lambda: references(True), args.repeats),
               "compare": timed_ms(compare, args.repeats),
               "roll inputs": timed_ms(lambda: backend.roll_inputs(requests[1], inputs, (5, 9, 11)), args.repeats)}
        rows.append(row)
        print("  ".join(f"{k} {v:.2f}" if isinstance(v, float) else str(v) for k, v in row.items()), flush=True)
        for buffers in requests:
            backend.release(buffers)
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(f"{row[c]:.2f}" if isinstance(row[c], float) else row[c] for c in columns) + " |")


if __name__ == "__main__":
    main()
