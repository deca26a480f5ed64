"""Profile the question-driven search's best kernels with Nsight Compute and put the figures on each kernel as a
note (`evokernel note`), so that every later prompt about it shows them: every answerer asked for memory traffic,
L2 hit rates, pipe use and stall reasons, which the harness's timing does not take.

On the GPU machine (device tool), before `question_round.sh` writes the next prompts:
    python3 experiments/attention_hopper/profile_kernels.py RUN --top 4
Each kernel is built as the harness builds it (the same nvcc line) and called once per scenario of `fa3-2k`,
each call inside an NVTX range named after its scenario, under `ncu --clock-control none` (the clocks stay as
they are). The kernels are the run's own, already verified by the harness; this runs on a machine of its own.
Writes $OUT/profile-ID.md (the note) and $OUT/profile-ID.log; `--call SO` is the profiled program itself.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import io
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SCENARIOS = "fa3-2k"
SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "WarpStateStats", "LaunchStats",
            "Occupancy")
# Beside the sections: bytes moved and the tensor pipe, which no section above collects on sm_90 (names from
# `ncu --query-metrics --chip gh100`)
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active")
RANGE = "evk"  # the outer NVTX range of the profiled calls: ncu profiles the kernels inside it only


class Params(ctypes.Structure):  # evk_attention_params of evk_attention.h
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("causal", ctypes.c_int), ("softmax_scale", ctypes.c_float)]


def call_each_scenario(library: str) -> None:
    """The profiled program: one warm-up call per scenario, then one call inside RANGE/<scenario>."""
    import torch

    from evokernel.harness import get_task

    entry = ctypes.CDLL(library).evk_attention_fwd
    entry.argtypes = [ctypes.POINTER(Params), ctypes.c_void_p]
    for scenario in get_task("attention-fwd").scenarios(SCENARIOS):
        def tensor(seqlen: int, heads: int) -> torch.Tensor:
            return torch.randn(scenario.batch, seqlen, heads, scenario.head_dim, device="cuda", dtype=torch.bfloat16)

        q, k, v = (tensor(scenario.seqlen_q, scenario.heads_q), tensor(scenario.seqlen_k, scenario.heads_kv),
                   tensor(scenario.seqlen_k, scenario.heads_kv))
        o = torch.empty_like(q)
        scale = scenario.softmax_scale or 1 / math.sqrt(scenario.head_dim)
        params = Params(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), scenario.batch, scenario.heads_q,
                        scenario.heads_kv, scenario.seqlen_q, scenario.seqlen_k, scenario.head_dim,
                        int(scenario.causal), scale)
        stream = torch.cuda.current_stream().cuda_stream
        assert entry(ctypes.byref(params), stream) == 0
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        torch.cuda.nvtx.range_push(scenario.name)
        assert entry(ctypes.byref(params), stream) == 0
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_pop()


def read_csv(report: Path, rename: bool) -> list[dict[str, str]]:
    """The report's raw page as rows of metric -> value (base units: bytes, nanoseconds, percent). With `rename`,
    each kernel is named after its innermost NVTX range (its scenario)."""
    ran = subprocess.run(["ncu", "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
                          *(["--print-nvtx-rename", "kernel"] if rename else [])],
                         capture_output=True, text=True, check=True)
    rows = list(csv.reader(io.StringIO(ran.stdout[ran.stdout.index('"ID"'):])))
    header, data = rows[0], [row for row in rows[1:] if row and row[0].isdigit()]
    return [dict(zip(header, row)) for row in data]


def numbers(row: dict[str, str]) -> dict[str, float]:
    values = {}
    for name, text in row.items():
        try:
            values[name] = float(text.replace(",", ""))
        except ValueError:
            continue
    for name in [n for n in values if n == "gpu__time_duration.sum"]:
        values[name] /= 1e3  # ns -> µs
    return values


def top(values: dict[str, float], pattern: str, count: int) -> list[tuple[str, float]]:
    found = [(m.group(1), value) for name, value in values.items() if (m := re.match(pattern, name))]
    return sorted(found, key=lambda item: -item[1])[:count]


def note_text(rows: list[tuple[str, str, dict[str, float]]], version: str) -> str:
    """The note: one line per profiled kernel launch, then its busiest pipes and its stall reasons."""
    def get(values: dict, name: str, scale: float = 1, digits: int = 0) -> str:
        return f"{values[name] / scale:.{digits}f}" if name in values else "-"

    lines = [f"Nsight Compute {version}, one call per scenario of `{SCENARIOS}` (clocks not locked; counters of a "
             "replayed kernel, caches flushed before each pass):",
             "| scenario | kernel | µs | DRAM read MB | DRAM write MB | L2↔SM MB | L2 hit % | DRAM % peak | SM % peak "
             "| warps active % | regs/thread |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for scenario, kernel, values in rows:
        lines.append(f"| {scenario} | {kernel[:40]} | {get(values, 'gpu__time_duration.sum', digits=1)} | "
                     f"{get(values, 'dram__bytes_read.sum', 1e6)} | {get(values, 'dram__bytes_write.sum', 1e6)} | "
                     f"{get(values, 'lts__t_bytes.sum', 1e6)} | {get(values, 'lts__t_sector_hit_rate.pct', digits=1)} | "
                     f"{get(values, 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed', digits=1)} | "
                     f"{get(values, 'sm__throughput.avg.pct_of_peak_sustained_elapsed', digits=1)} | "
                     f"{get(values, 'sm__warps_active.avg.pct_of_peak_sustained_active', digits=1)} | "
                     f"{get(values, 'launch__registers_per_thread')} |")
    lines.append("\nBusiest pipes (% of peak while the SM is active) and stall reasons (cycles per issued "
                 "instruction, the top five), per scenario:")
    for scenario, _, values in rows:
        pipes = top(values, r"^sm__inst_executed_pipe_(\w+?)\.avg\.pct_of_peak_sustained_active$", 4) or \
            top(values, r"^sm__pipe_(\w+?)_cycles_active\.avg\.pct_of_peak_sustained_active$", 4)
        stalls = top(values, r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$", 5)
        lines.append(f"- {scenario}: pipes " + (", ".join(f"{n} {v:.0f}%" for n, v in pipes) or "-")
                     + "; stalls " + (", ".join(f"{n} {v:.2f}" for n, v in stalls) or "-"))
    return "\n".join(lines) + "\n"


def profile(run_dir: Path, kernel_id: int, source: Path, out: Path) -> Path | None:
    from evokernel.harness import get_task
    from evokernel.harness.languages import LANGUAGES

    task = get_task("attention-fwd")
    with tempfile.TemporaryDirectory(prefix="evk-profile-") as scratch:
        library = Path(scratch) / "kernel.so"
        built = subprocess.run(LANGUAGES["cuda"].compile_command(source, task.header.parent, library),
                               capture_output=True, text=True)
        if built.returncode != 0:
            (out / f"profile-{kernel_id}.log").write_text(built.stderr)
            return None
        report = Path(scratch) / "profile"
        for metrics in (["--metrics", ",".join(METRICS)], []):  # without them where this ncu lacks one
            command = ["ncu", "--clock-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/",
                       *[arg for s in SECTIONS for arg in ("--section", s)], *metrics, "-f", "-o", str(report),
                       sys.executable, __file__, "--call", str(library)]
            ran = subprocess.run(command, capture_output=True, text=True, timeout=300)
            with open(out / f"profile-{kernel_id}.log", "a") as log:
                log.write(f"$ {' '.join(command)}\n{ran.stdout[-20000:]}{ran.stderr[-20000:]}\n")
            if ran.returncode == 0 and Path(f"{report}.ncu-rep").is_file():
                break
        if not Path(f"{report}.ncu-rep").is_file():
            return None
        plain = read_csv(Path(f"{report}.ncu-rep"), False)
        try:
            named = read_csv(Path(f"{report}.ncu-rep"), True)
        except subprocess.CalledProcessError:  # an ncu that cannot rename kernels by range: by order
            named = plain
        scenarios = [s.name for s in task.scenarios(SCENARIOS)]
        rows = [(n["Kernel Name"] if n["Kernel Name"] in scenarios
                 else scenarios[i] if len(plain) == len(scenarios) else f"call {i}", p["Kernel Name"], numbers(p))
                for i, (n, p) in enumerate(zip(named, plain))]
        if rows:
            (out / f"metrics-{kernel_id}.txt").write_text(
                "\n".join(f"{name} {value:g}" for name, value in sorted(rows[0][2].items())))
    version = re.search(r"Version ([\d.]+)", subprocess.run(["ncu", "--version"], capture_output=True,
                                                            text=True).stdout)
    note = out / f"profile-{kernel_id}.md"
    note.write_text(note_text(rows, version.group(1) if version else "?"))
    return note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?")
    parser.add_argument("--top", type=int, default=4, help="the run's best N correct kernels")
    parser.add_argument("--call", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.call:
        call_each_scenario(args.call)
        return
    from evokernel.store import Store

    out = Path(os.environ.get("OUT", "."))
    run_dir = Path(args.run)
    with Store(run_dir, readonly=True) as store:
        kernels = [(row.id, store.source_path(row.source_hash, row.language)) for row in store.best(args.top)]
    for kernel_id, source in kernels:
        try:
            note = profile(run_dir, kernel_id, source, out)
        except (subprocess.SubprocessError, ValueError, KeyError, IndexError) as exc:  # one kernel's profile
            print(f"#{kernel_id}: no profile ({type(exc).__name__}: {exc})")
            continue
        if note is None:
            print(f"#{kernel_id}: no profile (see profile-{kernel_id}.log)")
            continue
        subprocess.run(["evokernel", "note", str(run_dir), str(kernel_id), str(note), "--by",
                        "Nsight Compute (experiments/attention_hopper/profile_kernels.py)"], check=True)
        print(f"#{kernel_id}: profiled\n{note.read_text()}")


if __name__ == "__main__":
    main()
