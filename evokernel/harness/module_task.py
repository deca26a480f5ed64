"""A task whose problem is a PyTorch module file in the KernelBench format (`Model(nn.Module)` with
`get_inputs()` and `get_init_inputs()`): the module's forward is the reference, its parameters are inputs of
the kernel's ABI (fresh random values every check), an integer input holds indices drawn in its valid range,
and PyTorch eager (`torch`) and `torch.compile` (`compile`) are speed references timed beside the candidate.
`evokernel task new NAME --from-module FILE` writes a task directory whose `task.py` subclasses `ModuleTask`
with what it read from the module (`evokernel.harness.task_from_module`).

Scenarios scale the leading size that all of `get_inputs()`'s tensors share (a batch, or rows); every other
size, and every parameter's shape, is the module's own. PyTorch is needed wherever such a task is checked.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from evokernel.errors import BadInput
from evokernel.harness.task import Baseline, Indices, Scalar, Task, Tensor

MODULE_FILE = "module.py"
INDEX_TORCH_TYPES = {"int64": "int64", "int": "int32"}  # Indices.ctype -> torch dtype name


class CompileUnavailable(RuntimeError):
    """torch.compile cannot run the module here (no C++ compiler, an unsupported operation): one line, why."""


@dataclass(frozen=True)
class ModuleScenario:
    """The module's problem with the leading size of its inputs set to `batch`."""

    batch: int

    @property
    def name(self) -> str:
        return f"b{self.batch}"


def torch_module():
    try:
        import torch
    except ImportError:
        raise BadInput("a task made from a PyTorch module needs PyTorch: pip install torch") from None
    return torch


def load_module_file(path, module_name: str):
    """Import a module file under `module_name` (its top-level code runs, as loading any module does)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise BadInput(f"{path}: does not load: {first_line(exc)}") from None
    return module


def first_line(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its text that says something (torch.compile's
    errors open with "backend='inductor' raised:")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.rstrip().endswith("raised:")]
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def build_model(module, dtype, device: str = "cpu"):
    """`Model(*get_init_inputs())`, in `dtype` on `device`, built the same way every time (its own random
    initial weights are replaced by the kernel's inputs before any use)."""
    torch = torch_module()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
    return model.to(device=device, dtype=dtype).eval()


class ModuleTask(Task):
    """What a generated task.py fills in: the module's input names and base shapes, its parameters (argument
    name -> the module's parameter name and shape), its outputs' shapes and FLOP counts per scenario."""

    module_file: ClassVar[str] = MODULE_FILE
    input_shapes: ClassVar[dict[str, tuple[int, ...]]]  # forward's arguments, in order, at the module's own sizes
    scaled: ClassVar[bool] = True  # scenarios set the inputs' shared leading size (else the shapes are the module's)
    parameters: ClassVar[dict[str, tuple[str, tuple[int, ...]]]]  # ABI name -> (parameter name, shape)
    index_inputs: ClassVar[dict[str, tuple[str, int]]] = {}  # integer inputs: name -> (Indices.ctype, high)
    output_shapes: ClassVar[dict[int, dict[str, tuple[int, ...]]]]  # batch -> output name -> shape
    flop_counts: ClassVar[dict[int, float]]  # batch -> floating-point operations of one forward
    module_traits: ClassVar[frozenset[str]] = frozenset()  # `matrix-product` where the module multiplies matrices
    scenario_type = ModuleScenario
    # The plain reference is PyTorch's own forward in the working dtype, whose blocked sums err less than a
    # kernel's plain loop over a row (a correct naive fp32 Linear over 256 inputs was measured at 1.14 times
    # twice PyTorch's error); a kernel that computes in a narrower type errs by orders of magnitude more.
    tolerance_factor = 8.0
    tolerance_floor = 1e-5

    # -- the Task interface -------------------------------------------------------------------
    def traits(self, scenarios: list) -> frozenset[str]:
        return self.module_traits

    def reference_source(self) -> str:
        return (self.directory / self.module_file).read_text(errors="replace")

    def arguments(self, s: ModuleScenario) -> list[Tensor | Scalar]:
        # inputs and weights rolled as flat arrays between timed calls (the default): a roll along one axis gave
        # a row softmax of 1024 columns 1024 fresh inputs, so requests of 11 calls where a 5 us kernel needs 256
        tensors = ([Tensor(name, tuple(self._input_shape(name, s)), indices=self._indices(name))
                    for name in self.input_shapes]
                   + [Tensor(name, tuple(shape)) for name, (_, shape) in self.parameters.items()]
                   + [Tensor(name, tuple(shape), output=True) for name, shape in self.output_shapes[s.batch].items()])
        sizes = [Scalar(f"{t.name}_d{axis}", "int64", extent) for t in tensors for axis, extent in enumerate(t.shape)]
        return [*tensors, *sizes]

    def reference(self, arrays: dict, s: ModuleScenario, precise: bool) -> dict:
        torch = torch_module()
        dtype = torch.float64 if precise else getattr(torch, self.dtype)
        values, on_host = self._typed(arrays, dtype)
        outputs = self._forward(values, dtype, values[self._first_input].device)
        if on_host:
            return {name: out.double().numpy() for name, out in outputs.items()}
        return {name: out.float() if not precise else out for name, out in outputs.items()}

    def reference_at(self, s: ModuleScenario, picks: dict[str, np.ndarray], fetch) -> dict[str, np.ndarray]:
        """The whole forward in float64 on the host (outputs of a module share their work), then the picks."""
        arrays = {t.name: fetch(t.name, np.arange(t.size)).reshape(t.shape) for t in self.inputs(s)}
        full = self.reference(arrays, s, precise=True)
        return {name: full[name].reshape(-1)[flat] for name, flat in picks.items()}

    def flops(self, s: ModuleScenario) -> float:
        return float(self.flop_counts[s.batch])

    def baselines(self) -> dict[str, Baseline]:
        """PyTorch eager, and torch.compile: compiled only where it is timed, once per shape in a worker."""
        return {"torch": Baseline(self._eager, self._prepare_eager,
                                  description="the module's forward in PyTorch eager"),
                "compile": Baseline(self._eager, self._prepare_compiled,
                                    description="the module's forward under torch.compile (Inductor)")}

    @property
    def library_baselines(self) -> tuple[str, ...]:
        """What `check --baselines` times beside the speed reference: eager only. torch.compile is timed where it
        is named (`--original compile`, a config's `speed_reference`): its first call of a shape compiles, 12 s
        on a 2-core CPU."""
        return ("torch",)

    # -- the module ---------------------------------------------------------------------------
    @cached_property
    def _models(self) -> dict:
        return {}  # (dtype, device) -> the module built for the references

    @cached_property
    def _compiled(self) -> dict:
        return {}  # a module of `_models` -> it under torch.compile

    @cached_property
    def module(self):
        return load_module_file(self.directory / self.module_file, f"evokernel_module_{abs(hash(self.directory))}")

    @property
    def _first_input(self) -> str:
        return next(iter(self.input_shapes))

    def _indices(self, name: str) -> Indices | None:
        return Indices(self.index_inputs[name][1], self.index_inputs[name][0]) if name in self.index_inputs else None

    def _typed(self, arrays: dict, dtype) -> tuple[dict, bool]:
        """The backend's arrays as torch tensors in `dtype`, an index input's in its integer type; and whether
        they came as numpy arrays."""
        torch = torch_module()
        values, on_host = _as_tensors(arrays)
        return {name: value.to(getattr(torch, INDEX_TORCH_TYPES[self.index_inputs[name][0]])
                               if name in self.index_inputs else dtype)
                for name, value in values.items()}, on_host

    def _input_shape(self, name: str, s: ModuleScenario) -> tuple[int, ...]:
        return (s.batch, *self.input_shapes[name][1:]) if self.scaled else self.input_shapes[name]

    def _loaded_model(self, values: dict, dtype, device):
        """The module in `dtype` on `device` (built once for each), its parameters taken from `values` (by ABI
        name): every call overwrites all of them, so nothing of an earlier call's inputs stays."""
        torch = torch_module()
        key = (dtype, str(device))
        if key not in self._models:
            self._models[key] = build_model(self.module, dtype, str(device))
        model = self._models[key]
        held = dict(model.named_parameters())
        with torch.no_grad():
            for name, (parameter, shape) in self.parameters.items():
                held[parameter].copy_(values[name].reshape(shape))
        return model

    def _forward(self, values: dict, dtype, device) -> dict:
        """The module's outputs by name, from the inputs and parameters in `values`."""
        torch = torch_module()
        with torch.no_grad():
            result = self._loaded_model(values, dtype, device)(*[values[name] for name in self.input_shapes])
        results = result if isinstance(result, (tuple, list)) else (result,)
        return dict(zip(next(iter(self.output_shapes.values())), results))

    def _prepare_eager(self, arrays: dict, s: ModuleScenario) -> tuple:
        """The module loaded with these parameters (its outputs are timed, never checked), and its inputs."""
        dtype = getattr(torch_module(), self.dtype)
        values, _ = self._typed(arrays, dtype)
        model = self._loaded_model(values, dtype, values[self._first_input].device)
        return model, [values[name] for name in self.input_shapes]

    def _prepare_compiled(self, arrays: dict, s: ModuleScenario) -> tuple:
        """As `_prepare_eager`, with the module under torch.compile, called once here so that compiling (seconds
        a shape) is never timed; Dynamo keeps one graph per shape. CompileUnavailable says why it cannot run."""
        torch = torch_module()
        model, inputs = self._prepare_eager(arrays, s)
        try:
            import torch._inductor.config as inductor

            if model not in self._compiled:
                self._compiled[model] = torch.compile(model, dynamic=False)
            with inductor.patch(compile_threads=1):  # a pool of compilers took 28 s to its 12 s on one small module
                self._eager((self._compiled[model], inputs), s)
        except Exception as exc:
            raise CompileUnavailable(f"torch.compile does not run the module here: {first_line(exc)}") from None
        return self._compiled[model], inputs

    @staticmethod
    def _eager(prepared: tuple, s: ModuleScenario) -> Any:
        torch = torch_module()
        model, inputs = prepared
        with torch.no_grad():
            return model(*inputs)


def _as_tensors(arrays: dict) -> tuple[dict, bool]:
    """The backend's arrays as torch tensors (numpy on the host: shared, not copied), and whether they were numpy."""
    torch = torch_module()
    on_host = isinstance(next(iter(arrays.values())), np.ndarray)
    return {name: torch.from_numpy(np.asarray(a)) if on_host else a for name, a in arrays.items()}, on_host
