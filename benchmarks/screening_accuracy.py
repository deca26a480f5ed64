#!/usr/bin/env python3
"""How far a screened fitness (the candidate timed alone, against speed-reference times reused from an
earlier interleaved check on the same GPU) is from the interleaved fitness of the same kernel.

One process, one GPU (as one evaluation slot of a search): an interleaved check fills the reused times,
then pairs of checks of the same kernel, one screened and one interleaved, with `--gap-s` seconds of
reuse age between the first check and the last. Prints every geomean and the screened/interleaved ratios.

    python benchmarks/screening_accuracy.py --task attention-fwd --kernel evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu \
        --scenarios fa3-2k --speed-reference cudnn --pairs 4
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from evokernel.harness import CheckOptions, check_kernel, get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="attention-fwd-cpu")
    parser.add_argument("--kernel", type=Path, help="default: the task's original")
    parser.add_argument("--scenarios", default="quick")
    parser.add_argument("--speed-reference", default="original")
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    task = get_task(args.task)
    kernel = args.kernel or task.original
    options = CheckOptions(scenario_set=args.scenarios, speed_reference=args.speed_reference, warm_worker=True,
                           reference_reuse_s=3600)
    first = check_kernel(kernel, task, options)
    if not first.correct:
        raise SystemExit(f"the kernel is not correct: {first.failure}")
    print(f"interleaved (fills the reused times): {first.geomean_speedup:.4f}")
    ratios = []
    for pair in range(args.pairs):
        screened = check_kernel(kernel, task, dataclasses.replace(options, confirm_above=None))
        interleaved = check_kernel(kernel, task, dataclasses.replace(options, reference_reuse_s=None))
        assert screened.reference_reused and not interleaved.reference_reused
        ratios.append(screened.geomean_speedup / interleaved.geomean_speedup)
        print(f"pair {pair + 1}: screened {screened.geomean_speedup:.4f} ({screened.phase_seconds.get('timing', 0):.1f} s "
              f"timing), interleaved {interleaved.geomean_speedup:.4f} ({interleaved.phase_seconds.get('timing', 0):.1f} s "
              f"timing), ratio {ratios[-1]:.4f}")
    print(f"screened / interleaved: median {statistics.median(ratios):.4f}, "
          f"max |ratio - 1| {max(abs(r - 1) for r in ratios):.4f} over {len(ratios)} pairs")


if __name__ == "__main__":
    main()
