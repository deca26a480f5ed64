#!/usr/bin/env python3
"""What built CUDA kernels import: every `.cu` kernel of the tree and of an archived search run, built with
the harness's command (8 at a time), and the union of their undefined dynamic symbols, counted by kernel.
The CUDA import allowlist is written from this list.

    python experiments/trusted_timing/cuda_imports.py [RUN_ARCHIVE.tar.gz ...] > imports.txt
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evokernel.harness.build import build
from evokernel.harness.task_loader import get_task, load_task_dir

ROOT = Path(__file__).resolve().parents[2]
ARCHIVED = 16  # kernels taken from each archive (a wgmma kernel takes up to a minute to build)


def kernels(archives: list[str], scratch: Path) -> list[tuple[Path, Path]]:
    """(kernel source, ABI header) pairs."""
    attention = get_task("attention-fwd").header
    rmsnorm = load_task_dir(ROOT / "examples/tasks/rmsnorm").header
    found = [(path, attention) for path in [*(ROOT / "evokernel").rglob("*.cu"), *(ROOT / "experiments").rglob("*.cu")]
             if "rmsnorm" not in str(path)]
    found += [(path, rmsnorm) for path in (ROOT / "examples/tasks/rmsnorm").glob("*.cu")]
    for archive in archives:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        found += [(path, attention) for path in sorted(scratch.rglob("*.cu"))[:ARCHIVED]]
    return found


def imports(source: Path, header: Path) -> tuple[str, list[str] | str]:
    result = build(source.read_text(), "cuda", header)
    if not result.ok:
        return str(source), "does not build"
    listing = subprocess.run(["nm", "-D", "--undefined-only", str(result.library)], capture_output=True, text=True)
    return str(source), sorted({line.split()[-1].split("@")[0] for line in listing.stdout.splitlines() if line.strip()})


def main() -> None:
    counts: Counter[str] = Counter()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        pairs = kernels(sys.argv[1:], Path(scratch))
        with ThreadPoolExecutor(8) as pool:
            for name, symbols in pool.map(lambda pair: imports(*pair), pairs):
                results.append((name, symbols))
                print(f"# {name}: {symbols if isinstance(symbols, str) else ' '.join(symbols)}", flush=True)
                if not isinstance(symbols, str):
                    counts.update(symbols)
    built = sum(not isinstance(symbols, str) for _, symbols in results)
    print(f"# {built} of {len(results)} kernels built; symbol, kernels importing it")
    for symbol, count in sorted(counts.items()):
        print(f"{symbol}\t{count}")


if __name__ == "__main__":
    main()
