"""Run untrusted kernels in a child process: no secrets in its environment, a hard time limit,
its own process group (killed whole on timeout), a scratch directory as working directory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)


def clean_environment() -> dict[str, str]:
    """The current environment without anything that looks like a credential."""
    return {k: v for k, v in os.environ.items() if not SECRET_NAME.search(k)}


@dataclass
class WorkerOutcome:
    result: dict | None  # the worker's JSON answer, when it finished
    failure: str | None  # why there is no answer (crash, timeout)
    last_step: str | None  # the last step the worker announced before it stopped
    output: str  # the worker's captured stdout/stderr (trimmed)
    seconds: float  # wall time of the worker process, start to exit


def run_worker(request: dict, timeout_s: float) -> WorkerOutcome:
    """Run `python -m evokernel.harness.worker` on `request`; never raises for a bad kernel."""
    with tempfile.TemporaryDirectory(prefix="evk-worker-") as scratch:
        scratch_dir = Path(scratch)
        # The worker also ends itself shortly after the limit: if whoever started it dies first (a killed
        # evaluation actor), no orphaned kernel keeps the device busy.
        (scratch_dir / "request.json").write_text(json.dumps({**request, "self_destruct_s": timeout_s + 10}))
        env = clean_environment()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH")]))
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "evokernel.harness.worker", str(scratch_dir)],
            cwd=scratch_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        failure = None
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            failure = f"timed out after {timeout_s:.0f} s (killed)"
        seconds = time.perf_counter() - started
        text = output.decode(errors="replace")[-4000:]
        progress = scratch_dir / "progress.txt"
        steps = progress.read_text().splitlines() if progress.exists() else []
        last_step = steps[-1] if steps else None
        result_file = scratch_dir / "result.json"
        if failure is None and result_file.exists():
            return WorkerOutcome(json.loads(result_file.read_text()), None, last_step, text, seconds)
        if failure is None:
            code = proc.returncode
            if code < 0:
                failure = f"crashed ({signal.Signals(-code).name})"
            else:
                failure = f"worker exited with code {code} without a result"
        if last_step:
            failure += f" during {last_step}"
        return WorkerOutcome(None, failure, last_step, text, seconds)
