"""`evokernel task new NAME --from-module FILE`: a task directory written from a PyTorch module file in the
KernelBench format (`Model`, `get_inputs`, `get_init_inputs`).

Reading the file runs what loading it needs and nothing more: its top-level code, `get_init_inputs()`,
`Model(...)` and `get_inputs()`; shapes, outputs and FLOP counts come from running the forward on PyTorch's
meta device (shapes only, no data). A module with an integer (index) input is also run once per scenario on
the CPU, on zeros and its largest index, to keep only sizes where every index it is given is valid. The
directory is written whole or not at all: into a scratch folder beside it, checked by loading it as a task,
then renamed into place.

An index input's values are drawn uniformly in [0, high): `high` is the module file's own `index_ranges`
(forward argument name -> exclusive upper bound) where it declares one, else the largest value in
`get_inputs()`'s sample plus one (a range no larger than the one the module was written for).
"""

from __future__ import annotations

import inspect
from itertools import groupby
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evokernel.errors import BadInput, read_text
from evokernel.harness.languages import LANGUAGES
from evokernel.harness.module_task import (INDEX_TORCH_TYPES, MODULE_FILE, build_model, first_line,
                                           load_module_file, torch_module)
from evokernel.harness.task import DTYPES, INDEX_TYPES, Task

NAME_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
SCALE_DIVISORS = (16, 4, 2, 1)  # scenarios at these fractions of the module's own leading size
MEMORY_CAP_BYTES = {"c": 256 << 20, "cuda": 8 << 30}  # every tensor of one scenario, at the task's dtype
C_TYPES = {"float32": "float", "bfloat16": "__nv_bfloat16", "float16": "__half", "int64": "long long", "int": "int"}
INDEX_RANGES = "index_ranges"  # a module file's declared ranges of its index inputs


@dataclass
class ModuleSignature:
    """What a task needs to know of a module: its inputs (forward's argument names, the module's own shapes),
    its parameters (ABI name -> parameter name, shape), and per leading size its outputs' shapes and FLOPs."""

    input_shapes: dict[str, tuple[int, ...]]
    scaled: bool  # all inputs share their leading size, and scenarios scale it
    parameters: dict[str, tuple[str, tuple[int, ...]]]
    index_inputs: dict[str, tuple[str, int]]  # name -> (Indices.ctype, high)
    output_shapes: dict[int, dict[str, tuple[int, ...]]]
    flop_counts: dict[int, float]
    traits: frozenset[str] = frozenset()  # `matrix-product` where PyTorch's FLOP counter saw one (Linear, conv, matmul)


def inspect_module(path: Path, language: str, dtype: str) -> ModuleSignature:
    """Read a module file; BadInput naming the file and what is wrong for anything a task cannot be made of."""
    torch = torch_module()
    module = load_module_file(path, f"evokernel_inspected_{abs(hash(str(path)))}")
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, name)]
    if missing:
        raise BadInput(f"{path}: no {', '.join(missing)} (a module file defines Model, get_inputs and get_init_inputs)")
    inputs = list(_called(path, "get_inputs()", module.get_inputs))
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise BadInput(f"{path}: get_inputs() item {index} is a {type(value).__name__}, not a tensor "
                           "(scalar arguments are not supported yet)")
    names = [p for p in inspect.signature(module.Model.forward).parameters if p != "self"][:len(inputs)]
    if len(names) != len(inputs) or not inputs:
        raise BadInput(f"{path}: Model.forward takes {len(names)} tensors but get_inputs() gives {len(inputs)}")
    index_inputs = _index_inputs(path, module, dict(zip(names, inputs)))
    model = _called(path, "Model(*get_init_inputs())", lambda: build_model(module, torch.float32))
    parameters = {name.replace(".", "_"): (name, tuple(p.shape)) for name, p in model.named_parameters()}
    clash = set(parameters) & set(names)
    if clash:
        raise BadInput(f"{path}: a parameter and an input share the name {sorted(clash)[0]}")
    shapes = {name: tuple(t.shape) for name, t in zip(names, inputs)}
    first = next(iter(shapes.values()))
    scaled = all(shape and shape[0] == (first or (0,))[0] for shape in shapes.values())
    batches = sorted({max(1, first[0] // d) for d in SCALE_DIVISORS}) if scaled else [first[0] if first else 1]
    signature = ModuleSignature(shapes, scaled, parameters, index_inputs, {}, {})
    meta_model = build_model(module, torch.float32, "meta")
    invalid = ""  # why the largest indices fail the forward at some size
    for batch in batches:
        given = {name: (batch, *shape[1:]) if scaled else shape for name, shape in shapes.items()}
        outputs, flops = _forward_on_meta(path, torch, meta_model, _tensors(torch, given, index_inputs, "meta"))
        tensors = [*((s, _bytes(n, index_inputs, dtype)) for n, s in given.items()),
                   *((s, DTYPES[dtype]) for _, s in parameters.values()), *((o.shape, DTYPES[dtype]) for o in outputs)]
        if sum(math.prod(s) * size for s, size in tensors) > MEMORY_CAP_BYTES[language]:
            continue
        invalid = (_largest_indices_fail(torch, model, _tensors(torch, given, index_inputs, "cpu"))
                   if index_inputs else "")
        if invalid:
            continue
        signature.output_shapes[batch] = ({"out": tuple(outputs[0].shape)} if len(outputs) == 1 else
                                          {f"out{i}": tuple(o.shape) for i, o in enumerate(outputs)})
        signature.flop_counts[batch] = float(max(flops, sum(math.prod(o.shape) for o in outputs)))
        if flops > 0:  # the counter counts matrix products and convolutions only
            signature.traits = frozenset({"matrix-product"})
    if invalid and not signature.output_shapes:
        raise BadInput(f"{path}: the forward fails on its largest indices ({_ranges(index_inputs)}): {invalid}")
    if not signature.output_shapes:
        raise BadInput(f"{path}: even at a leading size of {batches[0]} the problem's tensors exceed the "
                       f"{MEMORY_CAP_BYTES[language] >> 20} MiB a {language} task holds")
    return signature


def _called(path: Path, what: str, call: Callable):
    """`call()`; BadInput naming `what` where the module's own code fails (e.g. it asks for a GPU)."""
    try:
        return call()
    except Exception as exc:
        raise BadInput(f"{path}: {what} fails: {first_line(exc)}") from None


def _index_inputs(path: Path, module, inputs: dict) -> dict[str, tuple[str, int]]:
    """Each integer input's type and range (see the module's docstring); BadInput for any other non-float input."""
    ctypes = {getattr(torch_module(), name): ctype for ctype, name in INDEX_TORCH_TYPES.items()}
    declared = getattr(module, INDEX_RANGES, {})
    integers = {name: value for name, value in inputs.items() if not value.is_floating_point()}
    if not isinstance(declared, dict) or set(declared) - set(integers) \
            or not all(isinstance(high, int) and high > 0 for high in declared.values()):
        raise BadInput(f"{path}: {INDEX_RANGES} maps integer inputs of Model.forward to positive ints "
                       f"(integer inputs: {', '.join(integers) or 'none'})")
    found = {}
    for name, value in integers.items():
        if value.dtype not in ctypes:
            raise BadInput(f"{path}: input {name} is a {value.dtype} tensor: an index input is int64 or int32")
        found[name] = (ctypes[value.dtype], declared.get(name, int(value.max()) + 1 if value.numel() else 0))
        if found[name][1] < 1:
            raise BadInput(f"{path}: no range for index input {name}: declare {INDEX_RANGES} = {{'{name}': HIGH}} "
                           "(values in [0, HIGH)) or give it positive values in get_inputs()")
    return found


def _tensors(torch, shapes: dict, index_inputs: dict, device: str) -> list:
    """Inputs of these shapes on `device`: zeros, and each index input at the top of its range."""
    return [torch.full(shape, index_inputs[name][1] - 1, dtype=getattr(torch, INDEX_TORCH_TYPES[index_inputs[name][0]]),
                       device=device) if name in index_inputs else torch.zeros(shape, device=device)
            for name, shape in shapes.items()]


def _bytes(name: str, index_inputs: dict, dtype: str) -> int:
    return INDEX_TYPES[index_inputs[name][0]] if name in index_inputs else DTYPES[dtype]


def _largest_indices_fail(torch, model, given: list) -> str:
    """Why the forward fails on these inputs (their indices at the top of their ranges); "" where it runs."""
    try:
        with torch.no_grad():
            model(*given)
    except Exception as exc:
        return first_line(exc)
    return ""


def _ranges(index_inputs: dict) -> str:
    return ", ".join(f"{name} up to {high - 1}" for name, (_, high) in index_inputs.items())


def _forward_on_meta(path: Path, torch, model, given: list) -> tuple[list, float]:
    """The forward's outputs (meta tensors) and its FLOPs as PyTorch's counter sees them."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            result = model(*given)
        with torch.no_grad():
            again = model(*given)
    except Exception as exc:
        raise BadInput(f"{path}: Model.forward fails on the inputs' shapes: {first_line(exc)}") from None
    results, again = ([*r] if isinstance(r, (tuple, list)) else [r] for r in (result, again))
    if not results or not all(isinstance(r, torch.Tensor) for r in results):
        kinds = ", ".join(type(r).__name__ for r in results) or "nothing"
        raise BadInput(f"{path}: Model.forward returns {kinds}, not a tensor or a tuple of tensors")
    shapes = [tuple(r.shape) for r in results]
    if shapes != [tuple(getattr(r, "shape", ())) for r in again]:
        raise BadInput(f"{path}: Model.forward's outputs change shape between calls on the same inputs "
                       f"({shapes} then {[tuple(getattr(r, 'shape', ())) for r in again]})")
    integer = [r.dtype for r in results if not r.is_floating_point()]
    if integer:
        raise BadInput(f"{path}: Model.forward returns a {integer[0]} tensor: a task's outputs are floating-point")
    return results, float(counter.get_total_flops())


def write_task(name: str, module_path: Path, directory: Path, language: str, dtype: str,
               first_kernel: Callable[[Task, str, Callable[[str], str | None]], str] | None) -> Path:
    """Write the task directory (whole or not at all); returns it. `first_kernel(task, module_source, check)`
    gives the task's original kernel, `check(source)` saying why a candidate is not correct (None: it is);
    without it the task has no original (`original_file = None`: a search's first kernel is written from the
    reference). BadInput for bad options, a bad module or no correct first kernel."""
    from evokernel.harness.task_loader import CPU_DTYPES, load_task_dir, task_names

    if not NAME_RE.fullmatch(name):
        raise BadInput(f"task name '{name}': lowercase words joined by hyphens (e.g. softmax-rows)")
    if name in task_names():
        raise BadInput(f"task name '{name}' is a built-in task's; choose another")
    if language not in LANGUAGES:
        raise BadInput(f"--language {language}: one of {', '.join(LANGUAGES)}")
    allowed = CPU_DTYPES if language == "c" else tuple(DTYPES)  # as the task loader checks it
    if dtype not in allowed:
        raise BadInput(f"--dtype {dtype}: a {language} task takes {', '.join(allowed)}")
    if directory.exists():
        raise BadInput(f"-o {directory}: already exists (a task is written into a new directory)")
    if not module_path.is_file():
        raise BadInput(f"--from-module {module_path}: file not found")
    module_text = read_text(module_path, "--from-module")
    signature = inspect_module(module_path, language, dtype)
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        entry = "evk_" + name.replace("-", "_")
        header = f"{entry}.h"
        original = f"original{LANGUAGES[language].extension}"
        task_py = lambda original_file: _task_py(name, entry, header, original_file, module_path.name,  # noqa: E731
                                                 signature, language, dtype)
        (scratch / MODULE_FILE).write_text(module_text)
        (scratch / header).write_text(_header(name, entry, signature, language, dtype))
        (scratch / "task.py").write_text(task_py(None))
        (scratch / "config.yaml").write_text(_config(name))
        task = load_task_dir(scratch)  # the written task loads, its scenarios are sound
        if first_kernel is not None:
            check = lambda source: _first_kernel_problem(source, task, header, original)  # noqa: E731
            (scratch / original).write_text(first_kernel(task, module_text, check))
            (scratch / "task.py").write_text(task_py(original))
        scratch.rename(directory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def _first_kernel_problem(source: str, task: Task, header: str, file_name: str) -> str | None:
    """Why a first kernel (to be `file_name`) is not the task's original (None: it passes every quick scenario,
    untimed; the task has no original yet, so the kernel is checked against the reference alone)."""
    from evokernel.harness.build import show_source_paths
    from evokernel.harness.check import CheckOptions, check_source

    report = check_source(source, task, CheckOptions(scenario_set="quick", speed_reference=task.default_speed_reference,
                                                     time_kernels=False), kernel_name=file_name)
    if report.correct:
        return None
    failure = show_source_paths(report.failure or "rejected", file_name).removeprefix("candidate ")
    log = "\n".join(line for line in (report.build_log or "").splitlines() if "error" in line.lower())
    return (f"{failure} (the header: {header}, the sizes in fields NAME_d0, NAME_d1, ...)"
            + (f"\n{show_source_paths(log, file_name)[:2000]}" if log else ""))


def _tensor_lines(signature: ModuleSignature) -> list[tuple[str, int, str]]:
    """(name, rank, role) of every tensor, in the struct's order."""
    some_outputs = next(iter(signature.output_shapes.values()))
    indices = {n: f"input: {C_TYPES[ctype]} indices in [0, {high})"
               for n, (ctype, high) in signature.index_inputs.items()}
    return ([(n, len(s), indices.get(n, "input")) for n, s in signature.input_shapes.items()]
            + [(n, len(s), f"parameter {p}") for n, (p, s) in signature.parameters.items()]
            + [(n, len(s), "output") for n, s in some_outputs.items()])


def _header(name: str, entry: str, signature: ModuleSignature, language: str, dtype: str) -> str:
    element = C_TYPES[dtype] if LANGUAGES[language].stream_argument else "float"
    tensors = _tensor_lines(signature)
    dims = lambda n, rank: ", ".join(f"{n}_d{axis}" for axis in range(rank))  # noqa: E731
    lines = [f"// ABI of the `{name}` task ({language}, {dtype}), written by `evokernel task new` from {MODULE_FILE}:",
             "// the module's forward, with its parameters passed in. Every tensor is contiguous and row-major;",
             "// its sizes are the struct's NAME_d0, NAME_d1, ... fields.",
             *(f"//   {n:<24} [{dims(n, rank)}]  {role}" for n, rank, role in tensors),
             "#pragma once"]
    if element != "float":
        lines.append("#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <cuda_runtime.h>")
    def pointer(name: str, role: str) -> str:  # a pointer's declaration: its type, and what it is
        if name in signature.index_inputs:
            ctype, high = signature.index_inputs[name]
            return f"const {C_TYPES[ctype]} ;  // read only: indices in [0, {high})"
        return f"{element} ;" if role == "output" else f"const {element} ;  // read only"

    runs = groupby(tensors, key=lambda tensor: pointer(tensor[0], tensor[2]))  # in the struct's order
    lines += ["", "typedef struct {",
              *("  " + kind.replace(" ;", " " + ", ".join(f"*{n}" for n, _, _ in run) + ";", 1) for kind, run in runs),
              "  long long " + ", ".join(dims(n, rank) for n, rank, _ in tensors) + ";",
              f"}} {entry}_params;", "", "#ifdef __cplusplus", 'extern "C"', "#endif"]
    stream = ", cudaStream_t stream" if LANGUAGES[language].stream_argument else ""
    lines.append(f"int {entry}(const {entry}_params* p{stream});  // 0 = ok")
    return "\n".join(lines) + "\n"


def _task_py(name: str, entry: str, header: str, original: str | None, source_name: str,
             signature: ModuleSignature, language: str, dtype: str) -> str:
    batches = sorted(signature.output_shapes)
    scenarios = lambda chosen: "(" + ", ".join(f"ModuleScenario({b})" for b in chosen) + ",)"  # noqa: E731
    gpu = LANGUAGES[language].stream_argument
    class_name = "".join(part.capitalize() for part in name.split("-")) or "ModuleTaskFromFile"
    return f'''"""`{name}`: written by `evokernel task new` from {source_name} (kept here as {MODULE_FILE}); the module's
forward is the reference, PyTorch eager (`torch`) and torch.compile (`compile`) the library speed references."""

from evokernel.harness.module_task import ModuleScenario, ModuleTask


class {class_name}(ModuleTask):
    name = "{name}"
    description = "{source_name} as a task ({language}, {dtype})"
    language = "{language}"
    dtype = "{dtype}"
    header_file = "{header}"
    original_file = {original!r}
    entry = "{entry}"
    peak_flops = {1.0e15 if gpu else 2.0e12!r}
    peak_bytes_per_s = {5.0e12 if gpu else 1.0e12!r}
    tolerance_floor = {1e-4 if dtype != "float32" else 2e-5!r}
    input_shapes = {signature.input_shapes!r}
    scaled = {signature.scaled!r}
    parameters = {signature.parameters!r}
    index_inputs = {signature.index_inputs!r}
    output_shapes = {signature.output_shapes!r}
    flop_counts = {signature.flop_counts!r}
    module_traits = frozenset({sorted(signature.traits)!r})
    scenario_sets = {{"quick": {scenarios(batches[:2])}, "scaled": {scenarios(batches)}}}
'''


def _config(name: str) -> str:
    return f"""# A short search of this task against PyTorch eager; paths are relative to this file.
#   evokernel run config.yaml [--model MODEL]
name: {name}
task: .
scenarios: quick
speed_reference: torch
population_size: 6
budget:
  evaluations: 12
random_seed: 0
"""
