"""The benchmark scripts run end to end on the CPU task and write what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_attention_baselines_writes_a_table_with_date_and_command(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# results\n")
    kernel = ROOT / "evokernel/builtin_tasks/attention_fwd_cpu/original.c"
    proc = subprocess.run([sys.executable, "benchmarks/attention_baselines.py", "--task", "attention-fwd-cpu",
                           "--kernel", str(kernel), "--scenarios", "quick", "--rounds", "3",
                           "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = results.read_text()
    assert "## Baselines in one run, 20" in text and "Command: `python benchmarks/attention_baselines.py" in text
    assert "| scenario | kernel original GFLOP/s | original GFLOP/s |" in text
    assert text.count("| d") == 3  # one row per quick scenario


def test_harness_speed_reports_build_check_phases_and_repeatability(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# results\n")
    proc = subprocess.run([sys.executable, "benchmarks/harness_speed.py", "--task", "attention-fwd-cpu",
                           "--scenarios", "quick", "--results", str(results)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = results.read_text()
    assert "## Harness speed and repeatability, 20" in text and "Command: `python benchmarks/harness_speed.py" in text
    assert "- build of the original kernel, cold cache: " in text
    assert text.count("(3 scenarios, seed ") == 2  # two full checks of the same kernel
    for phase in ("build", "worker start", "verification", "timing"):
        assert f"{phase} " in text
    assert "- repeatability: geomeans differ by " in text
