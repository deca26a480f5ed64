"""What a prompt tells whoever answers it, who sees nothing else: the device and the task's peak rates, the
build command and limits, per-scenario rates and roofline fractions beside the speed reference's (named as
such), registers and spills from ptxas, the knobs, and the kernel's gain history."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evokernel.bank import Question, question_text
from evokernel.harness import get_task
from evokernel.harness.build import build
from evokernel.mutations import Parent
from evokernel.mutations.build_log import _demangle, compiler_messages, register_summary
from evokernel.mutations.edits import CHANGE_SHOWN
from evokernel.mutations.operators.questions import failure_text, parent_of
from evokernel.mutations.prompts import crossover_prompt, mutation_prompt, repair_prompt
from evokernel.search.operator_contexts import (CHILDREN_SHOWN, LINEAGE_DEPTH, SIDE_STEPS_SHOWN, OperatorContexts,
                                               answers_to_question, lineage_summary, parent_view)
from evokernel.store import Individual, LLMCall, Store, add_note
from evokernel.source import normalized_hash, source_hash

ROOT = Path(__file__).parents[1]
GPU_TASK = get_task("attention-fwd")
CPU_TASK = get_task("attention-fwd-cpu")
QUESTION = Question(id="tensor-peak-fraction", text="What fraction of the tensor-core peak does the main loop reach?",
                    triggers=["default"], layers=["compute"])
# ptxas -v as nvcc 13 prints it for the FA2-style seed (one kernel spilling, as a changed kernel might; a device
# function's own properties last)
PTXAS_LOG = """\
ptxas info    : 8 bytes gmem
ptxas info    : Compiling entry function '_ZN7evk_fa215attn_fwd_kernelILi128ELi4ELi1ELi64ELi2ELb0ELb1EEEv20evk_attention_paramsfbiPfS2_' for 'sm_90a'
ptxas info    : Function properties for _ZN7evk_fa215attn_fwd_kernelILi128ELi4ELi1ELi64ELi2ELb0ELb1EEEv20evk_attention_paramsfbiPfS2_
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16 bytes smem
ptxas info    : Compile time = 200.579 ms
ptxas info    : (C7519) warpgroup.arrive is injected in around line 13886 by compiler to allow use of registers in GMMA in function '_ZN7evk_hop18attn_hopper_kernelILi256ELi80ELi2ELi2ELb1ELi24EEEv14CUtensorMap_stS1_S1_20evk_attention_paramsfii'
ptxas info    : Compiling entry function '_ZN7evk_fa214combine_splitsILi128EEEvPKfS2_P13__nv_bfloat16li' for 'sm_90a'
ptxas info    : Function properties for _ZN7evk_fa214combine_splitsILi128EEEvPKfS2_P13__nv_bfloat16li
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 35.201 ms
ptxas info    : Function properties for _ZN7evk_fa26helperEPf
    16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
"""


def gpu_report(**changes) -> dict:
    """A CheckReport of a Hopper kernel timed against cuDNN on two scenarios of fa3-2k (as measured on an H200)."""
    report = {
        "task": "attention-fwd", "kernel": "individual 51", "scenario_set": "fa3-2k", "correct": True,
        "geomean_speedup": 1.0127, "failure": None, "speed_reference": "cudnn", "reference_reused": False,
        "device": "NVIDIA H200 (GPU 0, uuid fb99adad, sm_90, 132 SMs)", "build_log": PTXAS_LOG,
        "scenarios": [
            {"name": "d64-b8-h32-s2048", "correct": True, "max_err": 0.0005, "tolerance": 0.0011,
             "time_ms": 0.5501280, "original_time_ms": 0.5896960, "speedup": 1.0719, "spread": 0.0041},
            {"name": "d128-b8-h16-s2048-causal", "correct": True, "max_err": 0.0056, "tolerance": 0.0147,
             "time_ms": 0.2747200, "original_time_ms": 0.2714400, "speedup": 0.9881, "spread": 0.0052},
        ]}
    return {**report, **changes}


def cpu_report(**changes) -> dict:
    report = {
        "task": "attention-fwd-cpu", "kernel": "k.c", "scenario_set": "quick", "correct": True,
        "geomean_speedup": 1.15, "failure": None, "speed_reference": "original",
        "device": "AMD EPYC (x86_64, avx2, fma, 2 cores)", "build_log": "",
        "scenarios": [{"name": "d32-b1-h2-s48", "correct": True, "max_err": 1e-6, "tolerance": 4e-6,
                       "time_ms": 0.2006, "original_time_ms": 0.2279, "speedup": 1.136, "spread": 0.232}]}
    return {**report, **changes}


def rows(prompt: str) -> dict[str, list[str]]:
    """The results table's rows by scenario name, as cells."""
    return {cells[0]: cells for line in prompt.splitlines()
            if len(cells := [cell.strip() for cell in line.split(" | ")]) >= 10}


def test_a_cuda_prompt_names_cudnn_and_gives_rates_and_roofline_fractions_beside_cudnns():
    prompt = mutation_prompt(Parent(51, GPU_TASK.original.read_text(), 1.0127, report=gpu_report()), QUESTION,
                             "default", GPU_TASK)
    assert "times against cudnn (cuDNN's fused attention" in prompt
    assert "kernel #51, geomean speedup 1.013 over cudnn" in prompt and "over the original" not in prompt
    header, table = rows(prompt)["scenario"], rows(prompt)
    assert header[5:9] == ["TFLOP/s", "% of roofline (bound)", "cudnn ms", "cudnn TFLOP/s"]
    # 4 * b * h * d * s^2 FLOPs = 274.9 GFLOP in 0.5501 ms; the task's 1000 TFLOP/s would take 0.2749 ms
    assert table["d64-b8-h32-s2048"][5:9] == ["499.7", "50.0% (compute)", "0.5897", "466.1"]
    # causal: about half the pairs
    assert table["d128-b8-h16-s2048-causal"][5:9] == ["500.5", "50.1% (compute)", "0.2714", "506.6"]
    assert table["d64-b8-h32-s2048"][9] == "45%"  # max error / tolerance
    assert "d64-b8-h32-s2048: batch=8, heads_q=32, heads_kv=32, seqlen_q=2048" in prompt
    assert "- Device: NVIDIA H200 (GPU 0, uuid fb99adad, sm_90, 132 SMs)" in prompt
    assert "1000 TFLOP/s, 5.0 TB/s" in prompt
    build_line = next(line for line in prompt.splitlines() if line.startswith("- Build: `nvcc "))
    assert "-Xptxas -v" in build_line and "cuda_bf16.h" in build_line and "-Xlinker" not in build_line
    assert re.search(r"- Limits: compiling 180 s; a call of the kernel is stopped after 50 times", prompt)
    # how a time is taken, as the harness takes it: a request of several calls in the kernel's own process
    assert "This kernel runs in a process of its own" in prompt and "less the round trip of an empty request" in prompt
    # round-12 answerers could not tell whether the cache was flushed per call or per request, nor what ran between
    assert "flushed once before each request, not between its calls" in prompt
    assert "the calls back to back, on one stream, with nothing between them" in prompt
    # the question still opens and closes it; the contract and answer format stay
    assert prompt.startswith(f"# Question\n{QUESTION.text}\n") and f"# The question again\n{QUESTION.text}" in prompt
    assert "int evk_attention_fwd(" in prompt and "<<<<<<< SEARCH" in prompt


def test_registers_and_spills_are_summarised_per_kernel_function_from_ptxas_lines():
    prompt = mutation_prompt(Parent(51, GPU_TASK.original.read_text(), 1.0127, report=gpu_report()), QUESTION,
                             "default", GPU_TASK)
    assert "### Registers and spills per kernel function (ptxas, sm_90a)" in prompt
    table = rows(prompt) | {line.split(" | ")[0]: line.split(" | ") for line in prompt.splitlines() if " | " in line}
    assert table["evk_fa2::attn_fwd_kernel<128,4,1,64,2,false,true>"][1:] == ["255", "8 / 12", "24", "1", "16"]
    assert table["evk_fa2::combine_splits<128>"][1:] == ["32", "0 / 0", "0", "0", "0"]
    # ptxas's note is a compiler message, its kernel named as in the source; routine lines are not repeated
    messages = prompt.split("### Compiler messages", 1)[1]
    assert "function 'evk_hop::attn_hopper_kernel<256,80,2,2,true,24>'" in messages
    assert "Compile time" not in messages and "bytes gmem" not in messages
    without = mutation_prompt(Parent(51, GPU_TASK.original.read_text(), 1.0127, report=gpu_report(build_log="")),
                              QUESTION, "default", GPU_TASK)
    assert "(not known: the build log has no ptxas lines)" in without and "255" not in without


def test_a_long_build_log_keeps_every_functions_registers_and_cuts_only_messages():
    """A Hopper build prints more than LOG_LIMIT of ptxas lines alone (15 functions, long names): the stored log
    keeps them all, in order, and cuts the warnings between; the registers table is then whole."""
    from evokernel.harness.build import LOG_LIMIT, _trim
    functions = "".join(PTXAS_LOG.replace("attn_fwd_kernelILi128", f"attn_fwd_kernelILi{100 + n}")
                        .replace("combine_splitsILi128", f"combine_splitsILi{100 + n}")
                        for n in range(20))
    warnings = "".join(f"kernel.cu({n}): warning #177-D: variable x{n} was declared but never referenced\n"
                       for n in range(400))
    log = "kernel.cu(3): error first\n" + warnings + functions + warnings
    trimmed = _trim(log)
    assert len(log) > 5 * LOG_LIMIT and len(trimmed) < len(log) // 2
    assert _trim(PTXAS_LOG * 2) == PTXAS_LOG * 2  # short: as it is
    assert "kernel.cu(3): error first" in trimmed and trimmed.count("[messages trimmed]") == 1
    summary = register_summary(trimmed)
    assert summary == register_summary(functions) and "was cut" not in summary and "(and 16 more functions)" in summary
    assert "[trimmed]" not in compiler_messages(trimmed, "kernel.cu")


def test_a_log_cut_as_plain_text_is_cut_between_lines():
    """Answerers read "ime = 734.580 ms" as a kernel's compiler messages: the plain cut (when ptxas's table alone
    is too long to keep) split lines in two; it now keeps whole lines on both sides of its mark."""
    from evokernel.harness.build import LOG_LIMIT, RESOURCE_LIMIT, TRIMMED, _trim

    table = "".join(f"ptxas info    : Used {n % 200} registers, used 1 barriers, 4{n} bytes cmem[0] for kernel_{n}\n"
                    for n in range(RESOURCE_LIMIT // 60))
    lines = ("ptxas info    : Compile time = 734.580 ms\n" + table).splitlines()
    trimmed = _trim("\n".join(lines))
    assert TRIMMED in trimmed and len(trimmed) <= LOG_LIMIT + len(TRIMMED) + 2
    assert all(line in lines for line in trimmed.splitlines() if line != TRIMMED)


def test_the_rest_of_a_line_an_earlier_plain_cut_split_is_not_shown_as_a_compiler_message():
    """Kernels stored before the cut kept whole lines (#77 of the recorded run) still showed "ime = 734.580 ms" as
    their compiler messages to round-12 answerers; a whole line after the cut is kept."""
    old = (PTXAS_LOG + "ptxas info    : Compile t\n... [trimmed] ...\nime = 734.580 ms\n"
           "kernel.cu(9): warning: x unused\n")
    messages = compiler_messages(old, "kernel.cu")
    assert "ime = 734.580" not in messages and "warning: x unused" in messages
    whole = PTXAS_LOG + "... [trimmed] ...\nkernel.cu(8): warning: y unused\n"
    assert "warning: y unused" in compiler_messages(whole, "kernel.cu")


def test_a_long_log_says_functions_are_missing_and_messages_are_capped():
    log = PTXAS_LOG + "... [trimmed] ...\n" + "".join(f"kernel.cu(9): warning #177-D: variable x{n} unused\n"
                                                     for n in range(30))
    assert "(the build log was cut in the middle: functions compiled there are missing)" in register_summary(log)
    messages = compiler_messages(log, "kernel.cu")
    # ptxas's note and 11 warnings of 31 lines
    assert "x10 unused" in messages and "x11 unused" not in messages and "(and 19 more lines)" in messages
    assert "[trimmed]" not in messages
    assert compiler_messages(PTXAS_LOG.replace("(C7519)", "").splitlines()[0], "kernel.cu") == ""


def test_demangling_covers_templated_kernels_and_leaves_the_rest_alone():
    assert _demangle("_Z8spillingILi96EEvPfPKf") == "spilling<96>"
    assert _demangle("_ZN3ns26kernelILin3ELb1E13__nv_bfloat16EEvv") == "ns2::kernel<-3,true,__nv_bfloat16>"
    assert _demangle("_ZN2ns6kernelEv") == "ns::kernel"
    assert _demangle("attn_kernel") == "attn_kernel"  # extern "C"
    assert _demangle("_Z6kernelIPfEvv") == "_Z6kernelIPfEvv"  # a pointer type argument: not this small form


SPILLING = """#include "evk_attention.h"

template <int N>
__global__ void __launch_bounds__(1024, 2) spilling(float* out, const float* in) {
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = in[threadIdx.x * N + i];
  for (int r = 0; r < 8; ++r) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * acc[(i + r) % N] + 1.0f;
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += acc[i];
  out[threadIdx.x] = s;
}

extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  spilling<96><<<1, 32, 0, stream>>>((float*)p->o, (const float*)p->q);
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_spilling_kernel_built_by_the_harness_shows_its_spills_also_from_the_build_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path))
    first, again = (build(SPILLING, "cuda", GPU_TASK.header) for _ in range(2))
    assert first.ok and again.cached and again.log == first.log, first.log
    summary = register_summary(again.log)
    [row] = [line for line in summary.splitlines() if line.startswith("spilling<96> | ")]
    stores, loads = re.search(r"\| (\d+) / (\d+) \|", row).groups()
    assert int(stores) > 0 and int(loads) > 0, summary


def test_knob_values_and_what_a_knob_is_appear():
    source = CPU_TASK.original.read_text()
    prompt = mutation_prompt(Parent(3, source, 1.1, knobs={"BLOCK_Q": "4", "BLOCK_K": "8", "KEY_OUTER": "0",
                                                           "THREADS": "1"}, report=cpu_report()),
                             QUESTION, "default", CPU_TASK)
    knobs = prompt.split("### Its knobs\n", 1)[1].split("\n", 2)
    assert knobs[0] == ("BLOCK_Q=4 (of 1,2,4,8,16,32), BLOCK_K=8 (of 4,8,16,32,64), KEY_OUTER=0 (of 0,1), "
                        "THREADS=1 (of 0,1,2,4)")
    assert knobs[1].startswith("A line `#define NAME value  // @knob a,b,c` is a knob")
    # a parent whose knobs were not recorded: the values its source sets
    assert "BLOCK_Q=4 (of 1,2,4,8,16,32)" in mutation_prompt(Parent(3, source, 1.1, report=cpu_report()),
                                                            QUESTION, "default", CPU_TASK)
    none = mutation_prompt(Parent(3, "int x;\n", 1.1, report=cpu_report()), QUESTION, "default", CPU_TASK)
    assert "### Its knobs\nnone. A line" in none
    broken = mutation_prompt(Parent(3, "#define B 3 // @knob 1,2\n", 1.1, report=cpu_report()), QUESTION,
                             "default", CPU_TASK)
    assert "its knob lines cannot be read: line 1: knob B has default 3" in broken


def add(store: Store, source: str, fitness: float | None, parents: list[int] | None = None, operator: str = "seed",
        question_id: str | None = None, knobs: dict | None = None, status: str | None = None,
        answer: str | None = None) -> int:
    call_id = store.add_llm_call(LLMCall(model="files", prompt="p", response=answer)) if answer else None
    kernel_id = store.add_individual(Individual(operator=operator, source_hash=source_hash(source),
                                                normalized_hash=normalized_hash(source), language="c",
                                                parent_ids=parents or [], question_id=question_id,
                                                knobs=knobs or {}, llm_call_id=call_id), source)
    store.update_individual(kernel_id, status=status or ("correct" if fitness is not None else "rejected"),
                            fitness=fitness,
                            failure=None if fitness is not None else "wrong result on d32-b1-h2-s48\nmore")
    return kernel_id


def test_a_step_of_the_history_gives_its_gain_in_each_scenario(tmp_path):
    """Answerers of "which scenario gains least" and of crossovers had only geomeans for earlier tries."""
    def report(first: float, second: float) -> dict:
        scenarios = cpu_report()["scenarios"][0]
        return cpu_report(scenarios=[{**scenarios, "name": "d32-b1-h2-s48", "speedup": first},
                                     {**scenarios, "name": "d64-b1-h2-s48", "speedup": second}])

    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        child = add(store, "int b;", 1.0247, [seed], "question-mutation", "barrier-waits")
        store.update_individual(seed, report=report(1.0, 1.0))
        store.update_individual(child, report=report(1.1, 0.95))
        view = parent_view(store, store.individual(child), "int b;")
        prompt = mutation_prompt(view, QUESTION, "default", CPU_TASK)
    assert view.lineage.splitlines()[1].endswith(": 1.000 -> 1.025 (+2.5%; per scenario +10.0 -5.0)")
    assert "\"per scenario\": a step's gain in each scenario, in %, in the order of the results table" in prompt


def test_the_gain_history_gives_each_steps_operator_question_knobs_and_fitness(tmp_path):
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0, knobs={"BLOCK_Q": "4", "BLOCK_K": "8"})
        tuned = add(store, "int b;", 1.1, [seed], "knob-mutation", knobs={"BLOCK_Q": "8", "BLOCK_K": "8"})
        store.add_proposed_question("q-own", "Does the key loop reload Q for every key block?", ["default"],
                                    ["memory"], tuned)
        asked = add(store, "int c;", 1.21, [tuned, seed], "question-crossover", "q-own",
                    knobs={"BLOCK_Q": "8", "BLOCK_K": "8"})
        add(store, "int d;", None, [asked], "question-mutation", "barrier-waits")
        add(store, "int e;", None, [asked], "repair", status="pending")
        store.update_individual(asked, report=cpu_report())
        view = parent_view(store, store.individual(asked), "int c;")
        prompt = mutation_prompt(view, QUESTION, "default", CPU_TASK)
    assert view.lineage.splitlines() == [
        "#1 seed: 1.000",
        "#2 from #1 by knob-mutation (BLOCK_Q 4 -> 8): 1.000 -> 1.100 (+10.0%)",
        '#3 from #2 + #1 by question-crossover, asked "Does the key loop reload Q for every key block?": '
        "1.100 -> 1.210 (+10.0%)",
        "Already made from #3 (2; latest last):",
        f'#4 from #3 by question-mutation, asked "{question_text("barrier-waits")}": 1.210 -> rejected '
        "(wrong result on d32-b1-h2-s48)",
        "#5 from #3 by repair: 1.210 -> not evaluated yet"]
    assert ("## How this kernel came about, and what was tried from it (fitness: geomean speedup over "
            "the original kernel)\n#1 seed: 1.000\n") in prompt


def test_what_was_tried_beside_the_line_is_told_so_that_an_answer_does_not_repeat_it(tmp_path):
    """The other children of the kernel's ancestors (a sibling's lost rewrite, a cousin's rejection) come after
    the line, each with its question and result."""
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        step = add(store, "int b;", 1.04, [seed], "question-mutation", "barrier-waits")
        cousin = add(store, "int c;", None, [seed], "knob-mutation", knobs={"BLOCK_Q": "8"})
        kernel = add(store, "int d;", 1.06, [step], "question-mutation", "barrier-waits")
        sibling = add(store, "int e;", 1.02, [step], "question-crossover", "barrier-waits")
        add(store, "int f;", 1.07, [kernel], "knob-mutation")  # a child: listed as before, not beside
        lines = lineage_summary(store, kernel).splitlines()
    assert lines[:4] == ["#1 seed: 1.000", f"#{step} from #{seed} by question-mutation, asked "
                         f'"{question_text("barrier-waits")}": 1.000 -> 1.040 (+4.0%)',
                         f"#{kernel} from #{step} by question-mutation, asked "
                         f'"{question_text("barrier-waits")}": 1.040 -> 1.060 (+1.9%)',
                         "Also tried from the kernels of this line (2; latest last):"]
    assert lines[4].startswith(f"#{cousin} from #{seed} by knob-mutation (BLOCK_Q - -> 8): 1.000 -> rejected")
    assert lines[5].startswith(f"#{sibling} from #{step} by question-crossover") and lines[5].endswith("(-1.9%)")
    assert lines[6:] == [f"Already made from #{kernel} (1; latest last):",
                         f"#{kernel + 2} from #{kernel} by knob-mutation: 1.060 -> 1.070 (+0.9%)"]


def test_each_step_says_the_change_its_answer_stated_so_that_siblings_do_not_repeat_it(tmp_path):
    """Answers are asked for a `Change:` line; the history shows it (outside code, shortened), for the line's
    steps, the tries beside it and the children; an answer without one shows none."""
    stated = ("1. The exponential unit limits d64.\n**Change:** a quarter of the exponentials as a cubic on the "
              "FMA pipe\n```c\n// Change: not this one, it is code\nint b;\n```\n")
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        step = add(store, "int b;", 0.97, [seed], "question-mutation", "barrier-waits", answer=stated)
        long = "Change: " + "tile " * 100
        sibling = add(store, "int c;", 0.99, [seed], "question-mutation", "barrier-waits", answer=long)
        child = add(store, "int d;", 1.0, [step], "question-mutation", "barrier-waits",
                    answer="no such line\n```c\nint d;\n```")
        lines = lineage_summary(store, step).splitlines()
    assert lines[1].endswith("0.970 (-3.0%); change: a quarter of the exponentials as a cubic on the FMA pipe")
    assert lines[2] == "Also tried from the kernels of this line (1; latest last):"
    assert lines[3].startswith(f"#{sibling} from #{seed}") and lines[3].endswith(
        "; change: " + ("tile " * 100)[:CHANGE_SHOWN - 3].rstrip() + "...")
    assert lines[4] == f"Already made from #{step} (1; latest last):"
    assert lines[5].startswith(f"#{child} from #{step}") and "change:" not in lines[5]
    assert "Change:` (later prompts" in mutation_prompt(Parent(1, "int a;", 1.0), QUESTION, "default", CPU_TASK)


def test_a_change_that_gained_is_told_whole_and_one_that_lost_only_in_short(tmp_path):
    """An answerer ported #194's gain to another line from its first 320 characters; a loss needs only enough
    not to be tried again."""
    idea = "Change: " + " ".join(f"step{i}" for i in range(150))  # about 1100 characters
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        gained = add(store, "int b;", 1.004, [seed], "question-mutation", "barrier-waits", answer=idea)
        lost = add(store, "int c;", 0.996, [seed], "question-mutation", "barrier-waits", answer=idea)
        kernel = add(store, "int d;", 1.0, [seed], "knob-mutation")
        lines = lineage_summary(store, kernel).splitlines()
    whole, short = (next(line for line in lines if line.startswith(f"#{k} ")) for k in (gained, lost))
    assert whole.endswith("; change: " + idea[len("Change: "):])
    assert short.endswith("...") and len(short.split("; change: ")[1]) == CHANGE_SHOWN


def test_the_questions_answers_on_other_lines_are_told_so_that_a_loss_there_is_not_tried_again(tmp_path):
    """An answerer saw only its own line and repeated K/V multicast, 17% slower when the same question was asked
    on another line: the prompt lists the question's earlier children the kernel's history does not show."""
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        other = add(store, "int b;", 1.1, [seed], "knob-mutation")
        lost = add(store, "int c;", 0.913, [other], "question-mutation", "barrier-waits",
                   answer="Change: K/V multicast over pairs of blocks\n```c\nint c;\n```")
        add(store, "int d;", 1.12, [other], "question-mutation", "between-tiles")  # another question
        kernel = add(store, "int e;", 1.05, [seed], "question-mutation", "barrier-waits")  # in the history
        view = parent_view(store, store.individual(kernel), "int e;")
        context = OperatorContexts(store, CPU_TASK, {}).make(0.5, "default")
        elsewhere = context.answers_to("barrier-waits", {kernel} | {seed})
        assert answers_to_question(store, "between-tiles", set()).startswith("#4 from #2")
    assert elsewhere.splitlines() == [f'#{lost} from #{other} by question-mutation, asked "{question_text("barrier-waits")}"'
                                      ": 1.100 -> 0.913 (-17.0%); change: K/V multicast over pairs of blocks"]
    prompt = mutation_prompt(view, QUESTION, "default", CPU_TASK, elsewhere=elsewhere)
    assert f"## This question asked of other kernels of this run (latest last)\n#{lost} from #{other}" in prompt
    assert "asked of other kernels" not in mutation_prompt(view, QUESTION, "default", CPU_TASK)


def test_notes_put_on_a_kernel_reach_every_later_prompt_about_it_latest_two_last(tmp_path):
    """Every answerer asked for profiler figures the harness does not take: a person or tool that has them puts them
    on the kernel (`evokernel note`), and the prompts about it show the latest."""
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        other = add(store, "int b;", 1.1, [seed], "knob-mutation")
        for text in ("DRAM read 812 MB", "L2 hit rate 91%", "top stall: long scoreboard 41%"):
            add_note(store.run_dir, seed, text, by="ncu 2025.3")
        bare = mutation_prompt(parent_view(store, store.individual(other), "int b;"), QUESTION, "default", CPU_TASK)
        view = parent_view(store, store.individual(seed), "int a;")
        second = parent_view(store, store.individual(other), "int b;")
    prompt = mutation_prompt(view, QUESTION, "default", CPU_TASK)
    section = prompt.split("### Notes on it (measurements and remarks given to the run, latest last)\n")[1]
    assert "DRAM read 812 MB" not in prompt and section.index("L2 hit rate 91%") < section.index("long scoreboard")
    assert re.match(r"From ncu 2025\.3, \d{4}-\d\d-\d\d \d\d:\d\d UTC:\nL2 hit rate 91%\n", section)
    assert "### Notes on it" not in bare
    crossed = crossover_prompt(second, view, QUESTION, CPU_TASK)
    assert crossed.count("### Notes on it") == 1 and "long scoreboard 41%" in crossed.split("## Kernel B")[1]


def test_a_long_line_shows_its_latest_steps_and_children(tmp_path):
    with Store(tmp_path / "run", create=True) as store:
        ids = [add(store, "int k0;", 1.0)]
        for n in range(1, LINEAGE_DEPTH + 3):
            ids.append(add(store, f"int k{n};", 1.0 + n / 100, [ids[-1]], "question-mutation", "unknown-question"))
        children = [add(store, f"int c{n};", 1.0, [ids[-1]], "knob-mutation") for n in range(CHILDREN_SHOWN + 2)]
        lines = lineage_summary(store, ids[-1]).splitlines()
    assert lines[0] == "(earlier steps not shown)"
    assert lines[LINEAGE_DEPTH] == (f"#{ids[-1]} from #{ids[-2]} by question-mutation, question unknown-question: "
                                    "1.090 -> 1.100 (+0.9%)")
    assert lines[LINEAGE_DEPTH + 1] == f"Already made from #{ids[-1]} ({CHILDREN_SHOWN + 2}, the latest " \
                                       f"{CHILDREN_SHOWN} shown; latest last):"
    assert [line.split()[0] for line in lines[LINEAGE_DEPTH + 2:]] == [f"#{c}" for c in children[2:]]


def test_a_cpu_prompt_gives_gflops_the_compiler_flags_and_the_cpu():
    prompt = mutation_prompt(Parent(1, CPU_TASK.original.read_text(), 1.15, report=cpu_report()), QUESTION,
                             "default", CPU_TASK)
    assert "- Device: AMD EPYC (x86_64, avx2, fma, 2 cores)" in prompt
    assert "`gcc -O3 -march=native -fopenmp" in prompt and "2000 GFLOP/s, 1.0 TB/s" in prompt
    assert "times against the task's original kernel" in prompt
    assert "geomean speedup 1.150 over the original kernel" in prompt
    # 4 * 1 * 2 * 32 * 48^2 = 589824 FLOPs in 0.2006 ms
    assert rows(prompt)["d32-b1-h2-s48"][5:8] == ["2.9", "0.1% (compute)", "0.2279"]
    assert "### Registers" not in prompt  # no ptxas for C


def test_missing_data_is_said_briefly():
    untimed = cpu_report(device=None, scenarios=[{"name": "d32-b1-h2-s48", "correct": True}])
    prompt = mutation_prompt(Parent(1, CPU_TASK.original.read_text(), None, report=untimed), QUESTION, "default",
                             CPU_TASK)
    assert "- Device: not reported (no check of this kernel ran on it)." in prompt
    assert "(no times in this report: the kernel was not timed)" in prompt
    assert rows(prompt)["d32-b1-h2-s48"][2:10] == ["-"] * 8
    fresh = mutation_prompt(Parent(1, GPU_TASK.original.read_text(), None), QUESTION, "default", GPU_TASK)
    assert "(not evaluated yet)" in fresh and "times against the run's speed reference" in fresh
    assert "no speedup (rejected or not evaluated)" in fresh
    gone = cpu_report(scenarios=[{"name": "d7-gone", "correct": True, "time_ms": 1.0, "speedup": 1.0}])
    assert rows(mutation_prompt(Parent(1, "int x;", 1.0, report=gone), QUESTION, "default", CPU_TASK))[
        "d7-gone"][5:7] == ["-", "-"]


def test_a_directory_task_memory_bound_against_a_library_without_a_description():
    task = get_task(ROOT / "examples/tasks/rmsnorm")
    report = {"task": "rmsnorm", "scenario_set": "models", "correct": True, "geomean_speedup": 1.5,
              "speed_reference": "torch", "device": "NVIDIA H200 (GPU 0)",
              "scenarios": [{"name": "r4096-h4096", "correct": True, "time_ms": 0.04, "original_time_ms": 0.06,
                             "speedup": 1.5, "spread": 0.01, "max_err": 0.001, "tolerance": 0.004}]}
    prompt = mutation_prompt(Parent(2, task.original.read_text(), 1.5, report=report), QUESTION, "default", task)
    assert "times against torch. Answer" in prompt and "geomean speedup 1.500 over torch" in prompt
    # 4 tensors of 4096 x 4096 bf16 and a 4096 weight: 134.2 MB at 5 TB/s is 0.02685 ms
    assert rows(prompt)["r4096-h4096"][5:9] == ["1.7", "67.1% (memory)", "0.0600", "1.1"]
    assert "r4096-h4096: rows=4096, hidden=4096" in prompt and "int evk_rmsnorm(" in prompt


def test_crossover_and_repair_prompts_carry_the_same_facts():
    a = Parent(1, GPU_TASK.original.read_text(), 1.0127, report=gpu_report())
    b = Parent(2, GPU_TASK.original.read_text() + "// b\n", 0.9, report=gpu_report(build_log=""))
    crossed = crossover_prompt(a, b, QUESTION, GPU_TASK)
    assert crossed.count("times against cudnn") == 1 and crossed.count("| cudnn TFLOP/s |") == 2
    assert "Kernel A: kernel #1, geomean speedup 1.013 over cudnn" in crossed and "sm_90, 132 SMs" in crossed
    failing = gpu_report(correct=False, geomean_speedup=None, failure="candidate does not compile: error")
    repaired = repair_prompt(Parent(3, "broken", None, report=failing), QUESTION, GPU_TASK, "kernel.cu(3): error: x")
    assert "REJECTED: candidate does not compile" in repaired and "kernel.cu(3): error: x" in repaired
    assert "### Compiler messages" not in repaired  # the error holds the log already
    assert "### Registers and spills per kernel function" in repaired


def test_a_repair_of_a_kernel_that_built_shows_its_runtime_error_and_its_diff_against_the_parent_that_passed(tmp_path):
    """Round 11's repair answerers found 4,000 characters of ptxas lines under "The error" of a kernel that had
    built and then returned an error code, and no diff against the parent for "which change broke it"."""
    parent_source = GPU_TASK.original.read_text()
    broken_source = parent_source.replace("const int warp = threadIdx.x / 32", "const int warp = threadIdx.x / 33")
    assert broken_source != parent_source
    failing = gpu_report(correct=False, geomean_speedup=None, failure="d64-b8-h32-s2048: returned error code 5",
                         scenarios=[{"name": "d64-b8-h32-s2048", "correct": False, "error": "returned error code 5"}])
    error = failure_text(failing)
    assert error.startswith("d64-b8-h32-s2048: returned error code 5") and "ptxas" not in error
    compile_error = gpu_report(correct=False, failure="candidate does not compile: kernel.cu(3): error: x")
    assert "ptxas info" in failure_text(compile_error)  # a compile failure keeps its log
    with Store(tmp_path / "run", create=True) as store:
        parent_id = add(store, parent_source, 1.0931, knobs={"STAGES": 2})
        failing_id = add(store, broken_source, None, parents=[parent_id], operator="question-mutation",
                         knobs={"STAGES": 3})
        parent = parent_of(store, failing_id)
        assert parent_of(store, parent_id) is None and parent_of(None, failing_id) is None
        assert parent_of(store, 999) is None  # a kernel handed to an operator directly
    prompt = repair_prompt(Parent(failing_id, broken_source, None, {"STAGES": 3}, report=failing), QUESTION,
                           GPU_TASK, error, parent)
    error_section = prompt[prompt.index("### The error"):prompt.index("## How kernel")]
    assert "ptxas" not in error_section and "returned error code 5" in error_section
    assert (f"## How kernel #{failing_id} differs from kernel #{parent_id}, its parent (which passed: geomean "
            "speedup 1.093 over cudnn)") in prompt
    assert f"Knob values: STAGES #{parent_id} 2, #{failing_id} 3." in prompt
    assert "-  const int warp = threadIdx.x / 32" in prompt and "+  const int warp = threadIdx.x / 33" in prompt
    assert prompt.count("### The error") == 1


def test_a_crossover_prompt_compares_the_parents_and_says_how_far_the_reference_moved_between_their_checks():
    """Round-7 answerers compared two parents' milliseconds taken on two H200s whose cuDNN times differ by about 1%,
    and round-8 answerers could not tell 1-2% gaps from noise: the prompt sets the speedups side by side with both
    spreads, says how far the reference moved between the checks and marks a gap within either as noise."""
    a = Parent(1, GPU_TASK.original.read_text(), 1.0127, report=gpu_report())
    moved = [{**s, "original_time_ms": s["original_time_ms"] * drift, "speedup": s["speedup"] * gain}
             for s, drift, gain in zip(gpu_report()["scenarios"], (1.004, 0.99), (1.06, 1.004))]
    other_gpu = "NVIDIA H200 (GPU 0, uuid 8b9b9eac, sm_90, 132 SMs)"
    b = Parent(2, GPU_TASK.original.read_text() + "// b\n", 1.0, report=gpu_report(device=other_gpu, scenarios=moved))
    crossed = crossover_prompt(a, b, QUESTION, GPU_TASK)
    section = crossed[crossed.index("## Kernel A against kernel B"):]
    assert "on different devices: A on NVIDIA H200 (GPU 0, uuid fb99adad" in section and "B on " + other_gpu in section
    assert "cudnn's own times moved by 0.7% in the median scenario (at most 1.0%)" in section
    assert "d64-b8-h32-s2048 | 1.072 | 1.136 | 1.060 | 0.4% | 0.4% | 0.5897 | 0.5921 | +0.4%" in section
    assert "d128-b8-h16-s2048-causal | 0.988 | 0.992 | 1.004 (within noise) | 0.5% | 0.5% | 0.2714 | 0.2687 | -1.0%" \
        in section
    assert "B is faster beyond noise on 1 of 2 scenarios, A on 0; every other difference is within noise." in section
    same = crossover_prompt(a, Parent(2, "int b;", 1.0, report=gpu_report()), QUESTION, GPU_TASK)
    assert "both on NVIDIA H200 (GPU 0, uuid fb99adad" in same and "moved by 0.0%" in same
    # round 10's answerers were told each parent was better somewhere where every difference was noise
    assert "no difference between them was measured" in same and "each is better than the other" not in same
    against_another = gpu_report(speed_reference="flash")
    assert "## Kernel A against kernel B" not in crossover_prompt(a, Parent(2, "int b;", 1.0, report=against_another),
                                                                  QUESTION, GPU_TASK)
    assert "## Kernel A against kernel B" not in crossover_prompt(a, Parent(2, "int b;", None), QUESTION, GPU_TASK)


def test_the_prompt_says_how_many_calls_each_timed_request_held():
    report = gpu_report(scenarios=[{**s, "calls_per_request": n} for s, n in zip(gpu_report()["scenarios"], (4, 8))])
    prompt = mutation_prompt(Parent(1, "int a;", 1.0, report=report), QUESTION, "default", GPU_TASK)
    assert "Calls of this kernel a timed request held: d64-b8-h32-s2048 4, d128-b8-h16-s2048-causal 8." in prompt
    assert "a timed request held" not in mutation_prompt(Parent(1, "int a;", 1.0, report=gpu_report()), QUESTION,
                                                         "default", GPU_TASK)


def test_a_crossover_prompt_tells_what_each_parents_line_tried(tmp_path):
    """Round 9's answerers of crossovers saw both kernels but not what had been tried from either (a mutation's
    answerer does): ideas that had lost on one parent's line came back in the child."""
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        first = add(store, "int b;", 1.1, [seed], "question-mutation", "barrier-waits")
        second = add(store, "int c;", 1.05, [seed], "knob-mutation", knobs={"BLOCK_Q": "8"})
        add(store, "int d;", 0.9, [first], "question-mutation", "barrier-waits")
        a, b = (parent_view(store, store.individual(i), source) for i, source in ((first, "int b;"), (second, "int c;")))
    prompt = crossover_prompt(a, b, QUESTION, CPU_TASK)
    for which, view in (("kernel A", a), ("kernel B", b)):
        assert (f"## How {which} came about, and what was tried from it (fitness: geomean speedup over the "
                f"original kernel)\n{view.lineage.strip()}\n") in prompt
    assert "#4 from #2 by question-mutation" in prompt  # what was tried from A


def test_a_long_list_of_tries_beside_the_line_keeps_the_ones_that_lost_or_gained_most(tmp_path):
    """Round 9's answerers re-tried an idea that had lost 3.5% because only the latest tries beside the line were
    shown: beyond SIDE_STEPS_SHOWN, the latest half stays and the earlier ones that moved the fitness most."""
    with Store(tmp_path / "run", create=True) as store:
        seed = add(store, "int a;", 1.0)
        kernel = add(store, "int b;", 1.01, [seed], "question-mutation", "barrier-waits")
        lost = add(store, "int lost;", 0.965, [seed], "question-mutation", "barrier-waits")
        broken = add(store, "int broken;", None, [seed], "question-mutation", "barrier-waits", status="rejected")
        flat = [add(store, f"int flat{n};", 1.0 + n / 10000, [seed], "question-mutation", "barrier-waits")
                for n in range(2 * SIDE_STEPS_SHOWN)]
        lines = lineage_summary(store, kernel).splitlines()
    header = next(n for n, line in enumerate(lines) if line.startswith("Also tried"))
    shown = [int(line.split()[0][1:]) for line in lines[header + 1:]]
    assert len(shown) == SIDE_STEPS_SHOWN and shown == sorted(shown)
    assert {lost, broken} <= set(shown) and shown[-(SIDE_STEPS_SHOWN // 2):] == flat[-(SIDE_STEPS_SHOWN // 2):]
    assert lines[header].startswith(f"Also tried from the kernels of this line ({2 * SIDE_STEPS_SHOWN + 2}; the latest")


def test_a_crossover_prompt_shows_how_the_parents_differ():
    """Round 10's answerers diffed two 1,500-line kernels by hand to find that they differed in two knobs: the prompt
    names the knob values that differ and shows the sources' diff where it is short."""
    source = GPU_TASK.original.read_text()
    a = Parent(1, source, 1.0, knobs={"BLOCK_N": "64", "STAGES": "2"})
    b = Parent(2, source.replace("#include", "// B keeps K in registers\n#include", 1), 1.0,
               knobs={"BLOCK_N": "128", "STAGES": "2"})
    crossed = crossover_prompt(a, b, QUESTION, GPU_TASK)
    section = crossed[crossed.index("## How kernel B differs from kernel A"):]
    assert section.startswith("## How kernel B differs from kernel A\nKnob values: BLOCK_N A 64, B 128.\n")
    assert "The sources, as a unified diff (1 line added or removed):\n```diff\n--- kernel A\n+++ kernel B\n" in section
    assert "\n+// B keeps K in registers\n" in section
    far = Parent(2, "\n".join(f"int v{n};" for n in range(300)), 1.0)
    assert "too long to show" in crossover_prompt(a, far, QUESTION, GPU_TASK)
    assert "The sources are the same." in crossover_prompt(a, Parent(2, source, 1.0), QUESTION, GPU_TASK)


def test_a_kernel_that_moves_registers_between_warpgroups_says_the_table_is_at_launch():
    """Round 10's answerers read ptxas's 168 registers as what a consumer warpgroup holds after setmaxnreg."""
    moves = GPU_TASK.original.read_text() + '\n// asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");\n'
    note = "moves them between its warpgroups at run time"
    assert note in mutation_prompt(Parent(1, moves, 1.0, report=gpu_report()), QUESTION, "default", GPU_TASK)
    assert note not in mutation_prompt(Parent(1, GPU_TASK.original.read_text(), 1.0, report=gpu_report()), QUESTION,
                                       "default", GPU_TASK)
