#!/usr/bin/env python3
"""Where a check's worker spends its time: one `check_source` with the worker run under cProfile (no
sandbox: the profile is written to a host path), then the functions by own time and by cumulative time.

    EVOKERNEL_ISOLATION=none python experiments/attention_hopper/profile_worker.py \
        --kernel evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu --scenarios fa3-2k --speed-reference cudnn

`--screened` profiles a check as a search screens a child: an unprofiled interleaved check first (the speed
reference's times), then the profiled one timing the candidate alone against them, in the same slot.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import tempfile
from pathlib import Path

from evokernel.harness import CheckOptions, check_source, get_task, supervisor
from evokernel.harness.slot import Slot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="attention-fwd")
    parser.add_argument("--kernel", type=Path, required=True)
    parser.add_argument("--scenarios", default="fa3-2k")
    parser.add_argument("--speed-reference", default="original")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--screened", action="store_true", help="profile a screened check (as a search's child)")
    args = parser.parse_args()
    if os.environ.get("EVOKERNEL_ISOLATION") != "none":
        raise SystemExit("set EVOKERNEL_ISOLATION=none: the profile is written outside the sandbox")
    profile = Path(tempfile.mkdtemp(prefix="evk-profile-")) / "worker.prof"
    popen = subprocess.Popen

    def profiled(argv, *rest, **kwargs):  # python -m evokernel.harness.worker ... under cProfile
        if "evokernel.harness.worker" in argv:
            argv = [argv[0], "-m", "cProfile", "-o", str(profile), *argv[1:]]
        return popen(argv, *rest, **kwargs)

    end = supervisor._end  # a worker that reported everything is killed at once: let it exit and write its profile
    supervisor.subprocess.Popen, supervisor._end = profiled, lambda proc, reported: end(proc, False)
    task, slot = get_task(args.task), Slot()
    options = CheckOptions(scenario_set=args.scenarios, speed_reference=args.speed_reference,
                           reference_reuse_s=3600.0 if args.screened else None)
    if args.screened:  # the speed reference's times to screen against, unprofiled
        supervisor.subprocess.Popen = popen
        check_source(args.kernel.read_text(), task, options, slot=slot)
        supervisor.subprocess.Popen = profiled
    report = check_source(args.kernel.read_text(), task, options, slot=slot)
    slot.close()
    supervisor.subprocess.Popen, supervisor._end = popen, end
    print(f"correct={report.correct} geomean={report.geomean_speedup} phases={report.phase_seconds}")
    if not profile.is_file():
        raise SystemExit(f"no profile written: {report.failure}")
    stats = pstats.Stats(str(profile))
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
