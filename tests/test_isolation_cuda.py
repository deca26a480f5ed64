"""Isolation and timing on the CUDA task (run on a GPU machine; skipped elsewhere).

The same host-side attacks as on the CPU task (tests/test_isolation.py; both run the tests of
tests/isolation_suite.py), from the host code of a CUDA kernel; the timing cheats decide on the device,
since host synchronisation is forbidden. Their sources are compiled and guarded without a GPU in
tests/test_isolation.py.
"""

from __future__ import annotations

import pytest

from evokernel.harness import CheckOptions, get_task
from isolation_suite import IsolationSuite
from planted import CUDA_ISOLATION, CUDA_TIMING

pytestmark = pytest.mark.gpu


class TestCudaIsolation(IsolationSuite):
    TASK = get_task("attention-fwd")
    ISOLATION = CUDA_ISOLATION
    TIMING = CUDA_TIMING
    OPTIONS = CheckOptions(scenario_set="quick", rounds=5)
    # The CUDA worker holds PyTorch and a device context, so its limit is above the CPU task's 1 GiB; the
    # attack touches 3 GiB on top of that.
    MEMORY_LIMITED = CheckOptions(scenario_set="quick", rounds=5, memory_limit_gb=3.0)
    # `evokernel check` on this task builds with nvcc and starts PyTorch, so it is given longer.
    CLI_TIMEOUT_S = 600
