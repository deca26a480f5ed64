"""`evokernel task new NAME --from-module FILE`: a task directory written from a PyTorch module file in the
KernelBench format (`Model`, `get_inputs`, `get_init_inputs`).

Reading the file runs what loading it needs and nothing more: its top-level code, `get_init_inputs()`,
`Model(...)` and `get_inputs()`; shapes, outputs and FLOP counts come from running the forward on PyTorch's
meta device (shapes only, no data). The directory is written whole or not at all: into a scratch folder beside
it, checked by loading it as a task, then renamed into place.
"""

from __future__ import annotations

import inspect
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evokernel.errors import BadInput, read_text
from evokernel.harness.languages import LANGUAGES
from evokernel.harness.module_task import MODULE_FILE, build_model, load_module_file, torch_module
from evokernel.harness.task import DTYPES, Task

NAME_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
SCALE_DIVISORS = (16, 4, 2, 1)  # scenarios at these fractions of the module's own leading size
MEMORY_CAP_BYTES = {"c": 256 << 20, "cuda": 8 << 30}  # every tensor of one scenario, at the task's dtype
C_TYPES = {"float32": "float", "bfloat16": "__nv_bfloat16", "float16": "__half"}


@dataclass
class ModuleSignature:
    """What a task needs to know of a module: its inputs (forward's argument names, the module's own shapes),
    its parameters (ABI name -> parameter name, shape), and per leading size its outputs' shapes and FLOPs."""

    input_shapes: dict[str, tuple[int, ...]]
    scaled: bool  # all inputs share their leading size, and scenarios scale it
    parameters: dict[str, tuple[str, tuple[int, ...]]]
    output_shapes: dict[int, dict[str, tuple[int, ...]]]
    flop_counts: dict[int, float]


def inspect_module(path: Path, language: str, dtype: str) -> ModuleSignature:
    """Read a module file; BadInput naming the file and what is wrong for anything a task cannot be made of."""
    torch = torch_module()
    module = load_module_file(path, f"evokernel_inspected_{abs(hash(str(path)))}")
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, name)]
    if missing:
        raise BadInput(f"{path}: no {', '.join(missing)} (a module file defines Model, get_inputs and get_init_inputs)")
    inputs = list(module.get_inputs())
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise BadInput(f"{path}: get_inputs() item {index} is a {type(value).__name__}, not a tensor "
                           "(scalar arguments are not supported yet)")
        if not value.is_floating_point():
            raise BadInput(f"{path}: get_inputs() item {index} is a {value.dtype} tensor: integer inputs are not "
                           "supported yet")
    names = [p for p in inspect.signature(module.Model.forward).parameters if p != "self"][:len(inputs)]
    if len(names) != len(inputs) or not inputs:
        raise BadInput(f"{path}: Model.forward takes {len(names)} tensors but get_inputs() gives {len(inputs)}")
    model = build_model(module, torch.float32)
    parameters = {name.replace(".", "_"): (name, tuple(p.shape)) for name, p in model.named_parameters()}
    clash = set(parameters) & set(names)
    if clash:
        raise BadInput(f"{path}: a parameter and an input share the name {sorted(clash)[0]}")
    shapes = {name: tuple(t.shape) for name, t in zip(names, inputs)}
    first = next(iter(shapes.values()))
    scaled = all(shape and shape[0] == (first or (0,))[0] for shape in shapes.values())
    batches = sorted({max(1, first[0] // d) for d in SCALE_DIVISORS}) if scaled else [first[0] if first else 1]
    element = DTYPES[dtype]
    signature = ModuleSignature(shapes, scaled, parameters, {}, {})
    meta_model = model.to("meta")
    for batch in batches:
        given = [torch.empty((batch, *shape[1:]) if scaled else shape, device="meta") for shape in shapes.values()]
        outputs, flops = _forward_on_meta(path, torch, meta_model, given)
        tensors = [*(t.shape for t in given), *(s for _, s in parameters.values()), *(o.shape for o in outputs)]
        if sum(math.prod(s) for s in tensors) * element > MEMORY_CAP_BYTES[language]:
            continue
        signature.output_shapes[batch] = ({"out": tuple(outputs[0].shape)} if len(outputs) == 1 else
                                          {f"out{i}": tuple(o.shape) for i, o in enumerate(outputs)})
        signature.flop_counts[batch] = float(max(flops, sum(math.prod(o.shape) for o in outputs)))
    if not signature.output_shapes:
        raise BadInput(f"{path}: even at a leading size of {batches[0]} the problem's tensors exceed the "
                       f"{MEMORY_CAP_BYTES[language] >> 20} MiB a {language} task holds")
    return signature


def _forward_on_meta(path: Path, torch, model, given: list) -> tuple[list, float]:
    """The forward's outputs (meta tensors) and its FLOPs as PyTorch's counter sees them."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            result = model(*given)
    except Exception as exc:
        raise BadInput(f"{path}: Model.forward fails on the inputs' shapes: {type(exc).__name__}: "
                       f"{(str(exc).splitlines() or [''])[0][:200]}") from None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if not results or not all(isinstance(r, torch.Tensor) for r in results):
        kinds = ", ".join(type(r).__name__ for r in results) or "nothing"
        raise BadInput(f"{path}: Model.forward returns {kinds}, not a tensor or a tuple of tensors")
    return results, float(counter.get_total_flops())


def write_task(name: str, module_path: Path, directory: Path, language: str, dtype: str,
               first_kernel: Callable[[Task, str, Callable[[str], str | None]], str]) -> Path:
    """Write the task directory (whole or not at all); returns it. `first_kernel(task, module_source, check)`
    gives the task's original kernel, `check(source)` saying why a candidate is not correct (None: it is).
    BadInput for bad options, a bad module or no correct first kernel."""
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
        original = scratch / f"original{LANGUAGES[language].extension}"
        (scratch / MODULE_FILE).write_text(module_text)
        original.write_text(f"// {entry}: the first kernel is not written yet\n")
        (scratch / header).write_text(_header(name, entry, signature, language, dtype))
        (scratch / "task.py").write_text(_task_py(name, entry, header, original.name, module_path.name, signature,
                                                  language, dtype))
        (scratch / "config.yaml").write_text(_config(name))
        task = load_task_dir(scratch)  # the written task loads, its scenarios are sound

        def check(source: str) -> str | None:
            original.write_text(source)
            return _first_kernel_problem(source, task, header)

        original.write_text(first_kernel(task, module_text, check))
        scratch.rename(directory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def _first_kernel_problem(source: str, task: Task, header: str) -> str | None:
    """Why a first kernel is not the task's original (None: it passes every quick scenario, untimed)."""
    from evokernel.harness.build import show_source_paths
    from evokernel.harness.check import CheckOptions, check_source

    report = check_source(source, task, CheckOptions(scenario_set="quick", time_kernels=False),
                          kernel_name=task.original.name)
    if report.correct:
        return None
    failure = show_source_paths(report.failure or "rejected", task.original.name).removeprefix("candidate ")
    log = "\n".join(line for line in (report.build_log or "").splitlines() if "error" in line.lower())
    return (f"{failure} (the header: {header}, the sizes in fields NAME_d0, NAME_d1, ...)"
            + (f"\n{show_source_paths(log, task.original.name)[:2000]}" if log else ""))


def _tensor_lines(signature: ModuleSignature) -> list[tuple[str, int, str]]:
    """(name, rank, role) of every tensor, in the struct's order."""
    some_outputs = next(iter(signature.output_shapes.values()))
    return ([(n, len(s), "input") for n, s in signature.input_shapes.items()]
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
    read_only = [n for n, _, role in tensors if role != "output"]
    written = [n for n, _, role in tensors if role == "output"]
    lines += ["", "typedef struct {",
              f"  const {element} " + ", ".join(f"*{n}" for n in read_only) + ";  // read only",
              f"  {element} " + ", ".join(f"*{n}" for n in written) + ";",
              "  long long " + ", ".join(dims(n, rank) for n, rank, _ in tensors) + ";",
              f"}} {entry}_params;", "", "#ifdef __cplusplus", 'extern "C"', "#endif"]
    stream = ", cudaStream_t stream" if LANGUAGES[language].stream_argument else ""
    lines.append(f"int {entry}(const {entry}_params* p{stream});  // 0 = ok")
    return "\n".join(lines) + "\n"


def _task_py(name: str, entry: str, header: str, original: str, source_name: str, signature: ModuleSignature,
             language: str, dtype: str) -> str:
    batches = sorted(signature.output_shapes)
    scenarios = lambda chosen: "(" + ", ".join(f"ModuleScenario({b})" for b in chosen) + ",)"  # noqa: E731
    gpu = LANGUAGES[language].stream_argument
    class_name = "".join(part.capitalize() for part in name.split("-")) or "ModuleTaskFromFile"
    return f'''"""`{name}`: written by `evokernel task new` from {source_name} (kept here as {MODULE_FILE}); the module's
forward is the reference and PyTorch eager the speed reference (`torch`)."""

from evokernel.harness.module_task import ModuleScenario, ModuleTask


class {class_name}(ModuleTask):
    name = "{name}"
    description = "{source_name} as a task ({language}, {dtype})"
    language = "{language}"
    dtype = "{dtype}"
    header_file = "{header}"
    original_file = "{original}"
    entry = "{entry}"
    peak_flops = {1.0e15 if gpu else 2.0e12!r}
    peak_bytes_per_s = {5.0e12 if gpu else 1.0e12!r}
    tolerance_floor = {1e-4 if dtype != "float32" else 2e-5!r}
    input_shapes = {signature.input_shapes!r}
    scaled = {signature.scaled!r}
    parameters = {signature.parameters!r}
    output_shapes = {signature.output_shapes!r}
    flop_counts = {signature.flop_counts!r}
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
