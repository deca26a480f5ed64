"""Prompts for the question operators. The question is the centre: it opens the prompt and closes it.

Between the two, the prompt gives what is needed to answer it by measurement-minded reasoning, to a
model or to a person who sees nothing but the prompt: where the kernel is built and run (device, peak
rates, compiler command, limits, what the harness refuses), the kernel, its knobs, its per-scenario
results (time, achieved rate and fraction of the roofline, next to the speed reference's), its
registers and spills, how its line came about, and the task's ABI contract. The answer format (full
file or SEARCH/REPLACE edits) comes last.
"""

from __future__ import annotations

import dataclasses
import difflib
import statistics
from pathlib import Path

from evokernel.bank import Question
from evokernel.bank.proposed_questions import PROPOSAL_FORMAT
from evokernel.harness import LANGUAGES, CheckOptions, SpeedReference, Task, did_not_compile, profile_of
from evokernel.harness.guard import ALLOWED_INCLUDES, FORBIDDEN_CALLS
from evokernel.harness.object_imports import ALLOWED_CALLS, ALLOWED_CALLS_NOTE
from evokernel.harness.worker import LIMIT_FACTOR
from evokernel.mutations import Parent
from evokernel.mutations.build_log import compiler_messages, register_summary
from evokernel.source import KnobError, parse_knobs

PROMPT_VERSION = 14  # part of the replay key: raise it when a template below changes what is asked
DIFF_LINES_SHOWN = 240  # a crossover's unified diff of its parents, shown whole up to this many lines

WHY_NOW = {
    "default": "",
    "stagnation": "The best kernel has not improved for a while: the recent changes may all sit in one layer.",
    "declared-limit": "An earlier answer declared this kernel optimal or done, or returned it unchanged. "
                      "Treat that limit as a hypothesis to test, not a fact.",
    "suspicious-gain": "This kernel's last gain over its parent is suspiciously large. Before building on it, "
                       "find what could make the measurement or the result wrong.",
    "repair": "This kernel failed the harness (it did not build or gave wrong results).",
    "crossover": "Two kernels follow, each from a line of its own; where one is faster than the other beyond noise is "
                 "said below them.",
    "human": "A person watching this search asks this question about this kernel.",
}

def _fence(language: str) -> str:
    return LANGUAGES[language].fence


def _rate_unit(peak_flops: float) -> tuple[float, str]:
    """The rate unit for a task's scenarios: TFLOP/s on a device that peaks above 10 TFLOP/s, else GFLOP/s."""
    return (1e12, "TFLOP/s") if peak_flops >= 1e13 else (1e9, "GFLOP/s")


def _bandwidth(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e12:.1f} TB/s" if bytes_per_s >= 1e12 else f"{bytes_per_s / 1e9:.0f} GB/s"


def _reference(task: Task, report: dict | None) -> SpeedReference:
    return SpeedReference.recorded((report or {}).get("speed_reference") or "original", task)


def results_table(report: dict | None, task: Task) -> str:
    """Per-scenario verdict, error margin, speed and achieved rate from a CheckReport dict, as a small text
    table: the rate from the task's FLOP count, the fraction of the roofline its peak rates allow, and the
    same for the speed reference, so that an answer can tell a kernel far from the hardware's limit from one
    close to it; then what each column means and what each scenario is."""
    if not report:
        return "(not evaluated yet)"
    reference = _reference(task, report)
    short, unit = reference.column, _rate_unit(task.peak_flops)[1]
    known = {s.name: s for s in task.scenarios("all")}
    results = report.get("scenarios", [])
    if report.get("correct"):
        verdict = (f"correct on every scenario of the set {report.get('scenario_set', '?')}; fitness = geomean "
                   f"speedup over {reference.over}: {report.get('geomean_speedup'):.3f}")
    else:
        verdict = f"REJECTED: {report.get('failure') or 'unknown reason'}"
    lines = [verdict, f"scenario | ok | speedup | time ms | spread | {unit} | % of roofline (bound) | {short} ms | "
                      f"{short} {unit} | err / tolerance"]
    lines += [_scenario_row(s, known.get(s["name"]), task) for s in results]
    if not results:
        return "\n".join(lines)
    lines.append(f"err = max |output - float64 reference|; tolerance = {task.tolerance_factor:g} x the error of the "
                 f"same computation done plainly in {task.dtype}, + {task.tolerance_floor:g}.")
    if any(s.get("time_ms") for s in results):
        lines.append(f"speedup = {short} time / this kernel's time. This kernel runs in a process of its own; "
                     "its time is the harness's clock around a request that calls it on several sets of buffers in "
                     "a row (the calls back to back, on one stream, with nothing between them; the request ends "
                     "when they have returned and, on a GPU, the device is idle), less the round trip of an empty "
                     "request, divided by the request's calls. The cache is flushed once before each request, not "
                     "between its calls; each set of buffers gets new input values and poisoned outputs before the "
                     "request. Shown: the median over a scenario's requests (the sets of buffers come back in later "
                     "requests, at the same addresses, with new values; verification calls get buffers of their "
                     "own). A library reference is timed call by call in the harness's process, after a cache flush "
                     "each. spread = interquartile range / median; "
                     f"{unit} = the task's useful FLOPs / time; % of roofline = the least time the task's peak rates "
                     "allow for the scenario's FLOPs and bytes / time."
                     + (f" The {short} times were reused from an earlier check on this device."
                        if report.get("reference_reused") else "")
                     + _calls_per_request(results))
    else:
        lines.append("(no times in this report: the kernel was not timed)")
    lines.append("The scenarios:")
    lines += [_scenario_line(task, known[s["name"]]) for s in results if s["name"] in known]
    return "\n".join(lines)


def _scenario_line(task: Task, scenario) -> str:
    """A scenario's fields and its tensors' shapes: a task made from a module has one field (the batch), and the
    row length a kernel is built around is only in the shapes."""
    fields = ", ".join(f"{field}={value}" for field, value in dataclasses.asdict(scenario).items())
    return f"{scenario.name}: {fields}; " + ", ".join(f"{t.name} {list(t.shape)}" for t in task.tensors(scenario))


def _calls_per_request(results: list[dict]) -> str:
    """The calls each scenario's timed requests held (reports since calls_per_request was recorded)."""
    counts = [f"{s['name']} {s['calls_per_request']}" for s in results if s.get("calls_per_request")]
    return f" Calls of this kernel a timed request held: {', '.join(counts)}." if counts else ""


def _scenario_row(s: dict, scenario, task: Task) -> str:
    """One row of `results_table`; the rates need the scenario (None when the task no longer has it)."""
    scale = _rate_unit(task.peak_flops)[0]

    def rate(time_ms: float | None) -> str:
        return f"{task.flops(scenario) / (time_ms * 1e-3) / scale:.1f}" if scenario and time_ms else "-"

    roofline = "-"
    if scenario and s.get("time_ms"):
        compute_s, memory_s = task.flops(scenario) / task.peak_flops, task.min_bytes(scenario) / task.peak_bytes_per_s
        roofline = (f"{100 * task.roofline_floor_ms(scenario) / s['time_ms']:.1f}% "
                    f"({'compute' if compute_s >= memory_s else 'memory'})")
    error = (f"{100 * s['max_err'] / s['tolerance']:.0f}%" if s.get("max_err") is not None and s.get("tolerance")
             else "-")
    speed = f"{s['speedup']:.3f}" if s.get("speedup") else "-"
    time_ms = f"{s['time_ms']:.4f}" if s.get("time_ms") else "-"
    reference_ms = f"{s['original_time_ms']:.4f}" if s.get("original_time_ms") else "-"
    spread = f"{100 * s['spread']:.1f}%" if s.get("spread") is not None else "-"
    note = f" ({s['error']})" if s.get("error") else " (suspicious)" if s.get("suspicious") else ""
    return (f"{s['name']} | {'yes' if s.get('correct') else 'NO'} | {speed} | {time_ms} | {spread} | "
            f"{rate(s.get('time_ms'))} | {roofline} | {reference_ms} | {rate(s.get('original_time_ms'))} | {error}{note}")


def _setting(task: Task, report: dict | None) -> str:
    """Where the kernel is built and run, and what the harness refuses: what an answer may rely on."""
    facts = LANGUAGES[task.language]
    source = "kernel" + facts.extension
    arguments = facts.compile_command(Path(source), Path("."), Path("kernel.so"))
    # linker paths name folders of this machine's toolkit and say nothing about the code
    command = " ".join(a for n, a in enumerate(arguments) if "-Xlinker" not in arguments[max(n - 1, 0):n + 1])
    scale, unit = _rate_unit(task.peak_flops)
    device = (report or {}).get("device")
    device = f"{device} (as its check reported it)" if device else "not reported (no check of this kernel ran on it)"
    refused = "; ".join(dict.fromkeys(reason for _, reason in FORBIDDEN_CALLS))
    includes = ", ".join(sorted(ALLOWED_INCLUDES[task.language]))
    return (
        "## Where the kernel is built and run\n"
        f"- Device: {device}.\n"
        f"- The task's peak rates (its roofline; tensors are {task.dtype}): {task.peak_flops / scale:.0f} {unit}, "
        f"{_bandwidth(task.peak_bytes_per_s)}.\n"
        f"- Build: `{command}`, with the contract's header beside {source}. The kernel is this one file; it may "
        f"include the contract's header and {includes}. Nothing else is linked.\n"
        f"- Calls it may make (the harness reads the built object's imports and refuses any other by name): "
        f"{', '.join(ALLOWED_CALLS[task.language])}; {ALLOWED_CALLS_NOTE[task.language]}.\n"
        f"- Limits: compiling {CheckOptions.compile_timeout_s:.0f} s; a call of the kernel is stopped after "
        f"{LIMIT_FACTOR:.0f} times the task's original kernel's time (the kernel's own first call where the task has "
        "none; at least "
        f"{profile_of(task.backend).min_step_limit_s:.0f} "
        "s); a time below the roofline is timed again and then refused.\n"
        f"- The harness refuses a kernel that {refused}; one that writes outside its outputs or changes its inputs; "
        "and one whose outputs miss an element (they are poisoned with NaN before every call).\n")


def _knobs(parent: Parent) -> str:
    """The parent's knob values, with the values each allows, and what a knob line means."""
    try:
        knobs, note = parse_knobs(parent.source), ""
    except KnobError as error:
        knobs, note = {}, f" (its knob lines cannot be read: {error})"
    allowed = {name: knob.values for name, knob in knobs.items()}
    values = parent.knobs or {name: knob.value for name, knob in knobs.items()}
    meaning = ("A line `#define NAME value  // @knob a,b,c` is a knob: the search's knob operators (no LLM) set it to "
               "each listed value and mix values between kernels; value must be one of the list. Keep knob lines in "
               "this form; you may add knobs or change a list.")
    if not values:
        return f"### Its knobs\nnone{note}. {meaning}\n"
    shown = ", ".join(f"{name}={value}" + (f" (of {','.join(allowed[name])})" if name in allowed else "")
                      for name, value in values.items())
    return f"### Its knobs{note}\n{shown}\n{meaning}\n"


def _kernel_section(parent: Parent, task: Task, label: str, with_messages: bool = True) -> str:
    fitness = (f"geomean speedup {parent.fitness:.3f} over {_reference(task, parent.report).over}"
               if parent.fitness is not None else "no speedup (rejected or not evaluated)")
    log = (parent.report or {}).get("build_log") or ""
    registers = register_summary(log)
    if task.language == "cuda" and not registers:
        registers = "### Registers and spills\n(not known: the build log has no ptxas lines)\n"
    if registers and "setmaxnreg" in parent.source:  # answerers took ptxas's count for what each warpgroup holds
        registers += ("(ptxas's registers are each thread's at launch; this kernel's setmaxnreg moves them between its "
                      "warpgroups at run time, as its source says)\n")
    messages = compiler_messages(log, "kernel" + LANGUAGES[task.language].extension) if with_messages else ""
    notes = (f"\n### Notes on it (measurements and remarks given to the run, latest last)\n{parent.notes.strip()}\n"
             if parent.notes.strip() else "")
    return (f"## {label}: kernel #{parent.id}, {fitness}\n```{_fence(task.language)}\n"
            f"{parent.source.rstrip()}\n```\n\n{_knobs(parent)}\n### Its results per scenario\n"
            f"{results_table(parent.report, task)}\n" + (f"\n{registers}" if registers else "")
            + (f"\n{messages}" if messages else "") + notes)


def _answer_format(language: str, propose_question: bool) -> str:
    fence = _fence(language)
    text = (
        "## Answer format\n"
        "1. Answer the question in a few sentences: your hypothesis and the measurement that would confirm it.\n"
        "2. Say what you change in one line that starts with `Change:` (later prompts about this kernel's line "
        "show it, so that nobody tries it again unknowingly).\n"
        "3. Then give the new kernel, either as the complete file in one block:\n"
        f"```{fence}\n<the whole kernel file>\n```\n"
        "or as one or more edits of the kernel above, each with SEARCH text copied exactly from it:\n"
        "<<<<<<< SEARCH\n<lines of the current kernel>\n=======\n<their replacement>\n>>>>>>> REPLACE\n"
        "Keep the entry point and the ABI exactly as the contract states. If you conclude that no change can "
        "make it faster, say so plainly, explain which measurement shows it, and write `Change: none`.\n")
    if propose_question:
        text += ("4. Optionally, one new question that would have led you to this change sooner, bounded, "
                 "with no answer inside, checkable by a measurement, in this form:\n" + PROPOSAL_FORMAT + "\n")
    return text


def _contract(task: Task, with_reference: bool = True) -> str:
    """The ABI header; and what the kernel computes, where the task says it briefly (a module's forward): an
    answer about a softmax needs to know which axis it is over."""
    reference = task.reference_source() if with_reference else None
    return (f"## The contract (task {task.name}: {task.description})\n```c\n{task.header.read_text().rstrip()}\n```\n"
            + (f"What it computes (the reference):\n```python\n{reference.rstrip()}\n```\n" if reference else ""))


def _frame(question: Question, trigger: str, body: str, task: Task, report: dict | None, propose: bool) -> str:
    why = WHY_NOW.get(trigger, "")
    reference = _reference(task, report).described if report else "the run's speed reference"
    return (f"# Question\n{question.text}\n\n" + (f"{why}\n\n" if why else "")
            + "You are improving a kernel that a harness builds, verifies on every scenario against a reference, "
              f"and times against {reference}. Answer the question first; let the answer decide the change.\n\n"
            + _setting(task, report) + "\n" + body + "\n" + _contract(task) + "\n"
            + f"# The question again\n{question.text}\n\n" + _answer_format(task.language, propose))


def _lineage(parent: Parent, task: Task, which: str) -> str:
    """How `which` kernel came about and what was tried from it: the answerer sees which ideas its line already
    tried and how they did (in a crossover, for both parents: ideas that lost came back otherwise)."""
    over = _reference(task, parent.report).over
    per_scenario = ("; \"per scenario\": a step's gain in each scenario, in %, in the order of the results table"
                    if "; per scenario " in parent.lineage else "")
    return (f"## How {which} came about, and what was tried from it (fitness: geomean speedup over {over}"
            f"{per_scenario})\n{parent.lineage.strip()}\n") if parent.lineage.strip() else ""


def _elsewhere(answers: str) -> str:
    """Earlier answers to the same question from kernels the histories above leave out: an answerer saw only its
    own line and tried again what had lost on another (K/V multicast, 17% slower there)."""
    return (f"\n## This question asked of other kernels of this run (latest last)\n{answers.strip()}\n"
            if answers.strip() else "")


def mutation_prompt(parent: Parent, question: Question, trigger: str, task: Task,
                    propose_question: bool = False, elsewhere: str = "") -> str:
    """One parent and a question about it (`elsewhere`: the question's earlier answers outside its history)."""
    body = (_kernel_section(parent, task, "The kernel") + "\n" + _lineage(parent, task, "this kernel")
            + _elsewhere(elsewhere))
    return _frame(question, trigger, body, task, parent.report, propose_question)


def parents_compared(first: Parent, second: Parent, task: Task) -> str:
    """A against B per scenario, from their own checks, with how far the speed reference's times moved between
    those checks: two checks on different GPUs (or hours apart) time the same reference about 1% apart, so a
    difference in speedup within that is no measured difference (answerers compared milliseconds across checks)."""
    reports = [first.report or {}, second.report or {}]
    if not all(r.get("scenarios") for r in reports) or reports[0].get("speed_reference") != reports[1].get(
            "speed_reference"):
        return ""
    short = _reference(task, reports[0]).column
    b_rows = {s["name"]: s for s in reports[1]["scenarios"]}
    lines = [f"scenario | A speedup | B speedup | B / A | A spread | B spread | {short} ms in A's check | in B's check "
             "| moved"]
    drifts, faster = [], {"A": 0, "B": 0}
    for a in reports[0]["scenarios"]:
        b = b_rows.get(a["name"])
        if not b or not all(r.get("speedup") and r.get("original_time_ms") for r in (a, b)):
            continue
        drift = b["original_time_ms"] / a["original_time_ms"] - 1
        drifts.append(abs(drift))
        ratio, spreads = b["speedup"] / a["speedup"], [r.get("spread") for r in (a, b)]
        noise = max([abs(drift), *(s for s in spreads if s is not None)])
        if abs(ratio - 1) > noise:
            faster["B" if ratio > 1 else "A"] += 1
        shown = [f"{100 * s:.1f}%" if s is not None else "-" for s in spreads]
        lines.append(f"{a['name']} | {a['speedup']:.3f} | {b['speedup']:.3f} | {ratio:.3f}"
                     f"{' (within noise)' if abs(ratio - 1) < noise else ''} | {shown[0]} | {shown[1]} | "
                     f"{a['original_time_ms']:.4f} | {b['original_time_ms']:.4f} | {100 * drift:+.1f}%")
    if not drifts:
        return ""
    devices = [r.get("device") or "a device not reported" for r in reports]
    where = (f"both on {devices[0]}" if devices[0] == devices[1]
             else f"on different devices: A on {devices[0]}, B on {devices[1]}")
    return (f"## Kernel A against kernel B\nEach kernel was checked on its own, {where}. Between the two checks "
            f"{short}'s own times moved by {100 * statistics.median(drifts):.1f}% in the median scenario (at most "
            f"{100 * max(drifts):.1f}%): compare the speedups, not the milliseconds. A ratio B / A closer to 1 than "
            "that movement or either kernel's spread (interquartile range / median of its timed calls) is marked "
            "within noise: no measured difference.\n" + "\n".join(lines) + "\n"
            + f"B is faster beyond noise on {faster['B']} of {len(drifts)} scenarios, A on {faster['A']}"
            + ("; every other difference is within noise.\n" if sum(faster.values()) else
               ": no difference between them was measured.\n"))


def parents_differ(first: Parent, second: Parent, a: str = "A", b: str = "B", first_shown: bool = True,
                   about_first: str = "") -> str:
    """How kernel `b` differs from kernel `a`: the knob values that differ and, where it is short, the unified diff
    of their sources (answerers diffed two 1,500-line kernels by hand to find that they differed in two knobs; a
    repair asking which change broke a kernel had no diff against its parent at all)."""
    diff = list(difflib.unified_diff(first.source.splitlines(), second.source.splitlines(), f"kernel {a}",
                                     f"kernel {b}", n=2, lineterm=""))
    changed = sum(1 for line in diff[2:] if line[:1] in "+-")
    names = sorted(set(first.knobs) | set(second.knobs))
    knobs = [f"{name} {a} {first.knobs.get(name, '-')}, {b} {second.knobs.get(name, '-')}" for name in names
             if first.knobs.get(name) != second.knobs.get(name)]
    text = (f"## How kernel {b} differs from kernel {a}{about_first}\n"
            + (f"Knob values: {'; '.join(knobs)}.\n" if knobs else ""))
    if not diff:
        return text + "The sources are the same.\n"
    if len(diff) > DIFF_LINES_SHOWN:
        return text + (f"The sources differ in {changed} added or removed lines ({len(diff)} lines of unified "
                       "diff: too long to show" + ("; compare the two kernels above" if first_shown else "")
                       + ").\n")
    plural = "s" * (changed != 1)
    return (text + f"The sources, as a unified diff ({changed} line{plural} added or removed):\n```diff\n"
            + "\n".join(diff) + "\n```\n")


def crossover_prompt(first: Parent, second: Parent, question: Question, task: Task,
                     propose_question: bool = False, elsewhere: str = "") -> str:
    """Two parents and a question about their difference; the answer is one child (edits apply to the first)."""
    compared = parents_compared(first, second, task)
    body = (_kernel_section(first, task, "Kernel A") + "\n" + _kernel_section(second, task, "Kernel B")
            + (f"\n{compared}" if compared else "") + "\n" + parents_differ(first, second)
            + "".join(f"\n{_lineage(parent, task, which)}"
                      for parent, which in ((first, "kernel A"), (second, "kernel B")) if parent.lineage.strip())
            + _elsewhere(elsewhere)
            + "\nWrite one kernel that keeps what makes each of them fast. SEARCH/REPLACE edits apply to kernel A.\n")
    return _frame(question, "crossover", body, task, first.report or second.report, propose_question)


def repair_prompt(failing: Parent, question: Question, task: Task, error: str, parent: Parent | None = None) -> str:
    """A failing kernel, its compiler or verification error, how it differs from its own parent (`parent`, where
    that one passed: the change that broke it is in that diff), and a question about the cause. A compile error
    holds the build log, so the kernel's section then leaves out the compiler messages."""
    built = not did_not_compile((failing.report or {}).get("failure"))
    differs = ("\n" + parents_differ(parent, failing, f"#{parent.id}", f"#{failing.id}", first_shown=False,
                                     about_first=f", its parent (which passed: geomean speedup {parent.fitness:.3f} "
                                                 f"over {_reference(task, failing.report).over})")
               if parent is not None and parent.fitness is not None else "")
    body = (_kernel_section(failing, task, "The failing kernel", with_messages=built)
            + f"\n### The error\n```\n{error.strip()[-4000:]}\n```\n" + differs
            + "\nFix the cause of the error without giving up the kernel's design.\n")
    return _frame(question, "repair", body, task, failing.report, False)


def first_kernel_prompt(task: Task, question: Question, reference: str, previous: str | None = None,
                        error: str | None = None) -> str:
    """The first kernel of a task that has none: a question of the bank's `reference` layer, the task's reference
    (the PyTorch module it was made from, else its task.py), the scenarios, the contract; on a later attempt, the
    kernel that failed and why."""
    fence = _fence(task.language)
    scenarios = "\n".join(f"- {_scenario_line(task, s)}" for s in task.scenarios("all"))
    retry = (f"## Your previous kernel, which the harness rejected\n```{fence}\n{previous.rstrip()}\n```\n"
             f"### Why\n```\n{(error or '').strip()[-4000:]}\n```\nFix the cause.\n\n") if previous else ""
    return (f"# Question\n{question.text}\n\n# Write the first kernel of this task\n"
            "The task's reference is the code below: the forward of a PyTorch module (its parameters passed to the "
            "kernel as inputs), or the task's definition (its `reference` method). Write a kernel that computes "
            "exactly what the reference computes, for every scenario; make it correct and straightforward first "
            "(later questions make it fast).\n\n"
            f"## The reference\n```python\n{reference.rstrip()}\n```\n\n"
            f"## The scenarios (tensor shapes)\n{scenarios}\n\n" + _setting(task, None) + "\n" + _contract(task, with_reference=False)
            + "\n" + retry + "## Answer format\nThe complete kernel file in one block:\n"
            f"```{fence}\n<the whole kernel file>\n```\n")
