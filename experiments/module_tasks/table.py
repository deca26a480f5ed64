"""The H200 table of the module examples: each kernel against PyTorch eager and torch.compile, from the JSON
reports of `evokernel check KERNEL --task DIR --original compile --baselines` (device_check.sh).

    python experiments/module_tasks/table.py REPORT.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evokernel.harness import geomean


def row(path: Path) -> str:
    report = json.loads(path.read_text())
    if not report.get("correct"):
        return f"| {report['task']} | {path.stem} | rejected: {(report.get('failure') or '')[:120]} | | | | |"
    scenarios = report["scenarios"]
    kernel = [s["time_ms"] for s in scenarios]
    compiled = [s["original_time_ms"] for s in scenarios]
    eager = [s["baselines_ms"].get("torch") for s in scenarios]
    over_eager = [e / k for e, k in zip(eager, kernel) if e and k]
    over_compile = [c / k for c, k in zip(compiled, kernel) if c and k]
    return (f"| {report['task']} | {path.stem} | {min(kernel):.4f}-{max(kernel):.4f} | "
            f"{min(e for e in eager if e):.4f}-{max(e for e in eager if e):.4f} | "
            f"{min(compiled):.4f}-{max(compiled):.4f} | **{geomean(over_eager):.2f}** | **{geomean(over_compile):.2f}** |")


def main() -> None:
    print("| task | kernel | kernel ms | eager ms | torch.compile ms | over eager (geomean) | over torch.compile |")
    print("|---|---|---|---|---|---|---|")
    for name in sys.argv[1:]:
        print(row(Path(name)))


if __name__ == "__main__":
    main()
