#!/usr/bin/env python3
"""Four checks in a row of distinct variants of the FA2-style seed (each one built, as in a search) with
the warm worker, against cuDNN on fa3-2k, every one timed interleaved (no screening); prints each check's
phases. Measures what the speed reference's warm-up in the waiting worker saves.

    python experiments/attention_hopper/warm_reference_sequence.py TAG   (TAG names the variants)
"""

import sys
import time

from evokernel.harness import CheckOptions, check_source, get_task

task = get_task("attention-fwd")
src = open("evokernel/builtin_tasks/attention_fwd/seeds/attention_fa2.cu").read()
tag = sys.argv[1]
for i in range(4):
    t0 = time.perf_counter()
    r = check_source(src + f"\nstatic const int evk_variant_{tag}_{i} = {i};\n", task,
                     CheckOptions(scenario_set="fa3-2k", speed_reference="cudnn", warm_worker=True, reference_reuse_s=None))
    print(tag, i, r.correct, (r.failure or "")[:300], round(r.geomean_speedup or 0, 4), "wall",
          round(time.perf_counter() - t0, 2), {k: round(v, 2) for k, v in r.phase_seconds.items()}, flush=True)
