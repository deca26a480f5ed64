"""A task whose problem is a PyTorch module file in the KernelBench format (`Model(nn.Module)` with
`get_inputs()` and `get_init_inputs()`): the module's forward is the reference, its parameters are inputs of
the kernel's ABI (fresh random values every check), and PyTorch eager is a speed reference timed beside the
candidate. `evokernel task new NAME --from-module FILE` writes a task directory whose `task.py` subclasses
`ModuleTask` with what it read from the module (`evokernel.harness.module_inspection`).

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
from evokernel.harness.task import Baseline, Scalar, Task, Tensor

MODULE_FILE = "module.py"


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
        raise BadInput(f"{path}: does not load: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                       ) from None
    return module


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
    output_shapes: ClassVar[dict[int, dict[str, tuple[int, ...]]]]  # batch -> output name -> shape
    flop_counts: ClassVar[dict[int, float]]  # batch -> floating-point operations of one forward
    scenario_type = ModuleScenario
    # The plain reference is PyTorch's own forward in the working dtype, whose blocked sums err less than a
    # kernel's plain loop over a row (a correct naive fp32 Linear over 256 inputs was measured at 1.14 times
    # twice PyTorch's error); a kernel that computes in a narrower type errs by orders of magnitude more.
    tolerance_factor = 8.0
    tolerance_floor = 1e-5

    # -- the Task interface -------------------------------------------------------------------
    def arguments(self, s: ModuleScenario) -> list[Tensor | Scalar]:
        tensors = ([_rolled(name, self._input_shape(name, s)) for name in self.input_shapes]
                   + [_rolled(name, shape) for name, (_, shape) in self.parameters.items()]
                   + [Tensor(name, tuple(shape), output=True) for name, shape in self.output_shapes[s.batch].items()])
        sizes = [Scalar(f"{t.name}_d{axis}", "int64", extent) for t in tensors for axis, extent in enumerate(t.shape)]
        return [*tensors, *sizes]

    def reference(self, arrays: dict, s: ModuleScenario, precise: bool) -> dict:
        torch = torch_module()
        values, on_host = _as_tensors(arrays)
        dtype = torch.float64 if precise else values[self._first_input].dtype
        values = {name: value.to(dtype) for name, value in values.items()}
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
        return {"torch": Baseline(self._eager, self._prepare_eager, description="the module's forward in PyTorch eager")}

    # -- the module ---------------------------------------------------------------------------
    @cached_property
    def _models(self) -> dict:
        return {}  # (dtype, device) -> the module built for the references

    @cached_property
    def module(self):
        return load_module_file(self.directory / self.module_file, f"evokernel_module_{abs(hash(self.directory))}")

    @property
    def _first_input(self) -> str:
        return next(iter(self.input_shapes))

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
        values, _ = _as_tensors(arrays)
        first = values[self._first_input]
        return self._loaded_model(values, first.dtype, first.device), [values[name] for name in self.input_shapes]

    @staticmethod
    def _eager(prepared: tuple, s: ModuleScenario) -> Any:
        torch = torch_module()
        model, inputs = prepared
        with torch.no_grad():
            return model(*inputs)


def _rolled(name: str, shape: tuple[int, ...]) -> Tensor:
    """An input rolled along its longest axis between timed calls: a leading size of 4 gave only 4 distinct inputs
    in 30 calls (a kernel that kept its outputs by input would have seen most of them again), 50 columns gave 30."""
    return Tensor(name, tuple(shape), roll_axis=max(range(len(shape)), key=lambda axis: shape[axis]))


def _as_tensors(arrays: dict) -> tuple[dict, bool]:
    """The backend's arrays as torch tensors (numpy on the host: shared, not copied), and whether they were numpy."""
    torch = torch_module()
    on_host = isinstance(next(iter(arrays.values())), np.ndarray)
    return {name: torch.from_numpy(np.asarray(a)) if on_host else a for name, a in arrays.items()}, on_host
