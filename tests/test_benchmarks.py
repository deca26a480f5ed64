"""The benchmark scripts run end to end on the CPU task and write what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_attention_baselines_writes_a_table_with_date_and_command(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# results\n")
    kernel = ROOT / "evokernel/harness/tasks/attention_fwd_cpu/original.c"
    proc = subprocess.run([sys.executable, "benchmarks/attention_baselines.py", "--task", "attention-fwd-cpu",
                           "--kernel", str(kernel), "--scenarios", "quick", "--rounds", "3",
                           "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = results.read_text()
    assert "## Baselines in one run, 20" in text and "Command: `python benchmarks/attention_baselines.py" in text
    assert "| scenario | kernel original GFLOP/s | original GFLOP/s |" in text
    assert text.count("| d") == 3  # one row per quick scenario
