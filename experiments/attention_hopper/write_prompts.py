#!/usr/bin/env python3
"""Write a files-model run's next prompts on a machine without a GPU (this one): resume the run on a local Ray
instance that declares one logical GPU, with a budget above its evaluations. Every answered prompt must have
been evaluated already (the run's GPU task cannot check anything here); the proposals become prompts, and the
run stops once they all wait for answers. A prompt's device line and figures come from the stored reports.

    python experiments/attention_hopper/write_prompts.py experiments/attention_hopper/qruns/RUN BUDGET
"""

import sys

import ray

from evokernel.cli import main

if len(sys.argv) != 3:
    sys.exit(__doc__.strip().splitlines()[-1].strip())
ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
sys.argv = ["evokernel", "run", "--resume", sys.argv[1], "--budget", sys.argv[2], "--no-llm-check"]
main()
