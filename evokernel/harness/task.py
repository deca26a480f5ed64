"""What a task is: the interface a task directory implements (a user's own kernel as much as ours).

A task directory holds the ABI header candidates include, the original kernel (correct, the speed
reference by default) and `task.py`, which defines one subclass of `Task`. A task may come without an
original (`original_file = None`, as `evokernel task new` writes one when no first kernel is given): its
speed reference is then a library baseline, and a search's first kernel is written from the reference
(the `first-kernel` operator). The harness knows nothing
else about the problem: it makes the tensors `arguments` lists from seeded values, passes them to
the kernel's entry in one struct (a pointer per tensor, each scalar by value, in the listed order),
compares the outputs with `reference`, re-checks `sample`d elements with `reference_at` (on the
parent's side from regenerated inputs, trusting nothing the kernel's process says) and times the
kernel against a speed reference.

See `examples/tasks/rmsnorm_cpu/task.py` for a complete task written against this interface.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

# Element types of the tensors: bytes per element; inputs are rounded to the type (the parent does
# the same rounding when it regenerates them).
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
SCALAR_TYPES = ("int", "int64", "float", "double")
INDEX_TYPES = {"int64": 8, "int": 4}  # element types of an index tensor (as SCALAR_TYPES spells them): bytes
SAMPLED_ELEMENTS = 16  # elements per output that `Task.sample` picks by default
# Speed references that are kernels the harness built (and may write outputs); any other is a library baseline.
BUILT_SPEED_REFERENCES = ("original", "file")


@dataclass(frozen=True)
class Indices:
    """What an integer input holds: indices drawn uniformly in [0, high), of `ctype` (INDEX_TYPES), so that
    every value is valid wherever the task's reference uses it (a row of a table, a position)."""

    high: int
    ctype: str = "int64"


@dataclass(frozen=True)
class Tensor:
    """One array argument. Inputs are drawn from seeded values (floats of the task's dtype, or `indices`);
    outputs are poisoned with NaN before every call and must be written in full. Before each timed call the
    inputs are rolled by offsets no call has used, so that no call sees inputs an earlier call saw (a roll only
    moves values, so indices stay valid): as flat arrays, which gives as many fresh inputs as there are elements,
    or with `roll_axis` along that axis only, whole slices moved (for an input whose slices must stay intact)."""

    name: str
    shape: tuple[int, ...]
    output: bool = False
    roll_axis: int | None = None
    indices: Indices | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def roll_positions(self) -> int:
        """How many different offsets a roll of this input has (each a different input)."""
        return self.size if self.roll_axis is None else self.shape[self.roll_axis]

    def element_size(self, dtype: str) -> int:
        """Bytes per element in a task whose dtype is `dtype`."""
        return INDEX_TYPES[self.indices.ctype] if self.indices else DTYPES[dtype]


@dataclass(frozen=True)
class Scalar:
    """One scalar argument: `ctype` is one of SCALAR_TYPES."""

    name: str
    ctype: str
    value: float


@dataclass(frozen=True)
class Baseline:
    """A library implementation that can be timed against candidates (trusted: timed, never checked).
    `run(arrays, scenario)` is called in the timed region with the backend's arrays by name; `prepare`,
    if given, turns them into what `run` takes, once per set of inputs, outside the timed region."""

    run: Callable[[Any, Any], object]
    prepare: Callable[[dict, Any], Any] | None = None
    supports: Callable[[Any], bool] = lambda scenario: True
    description: str = ""  # what it is, in a few words (a prompt names the speed reference with it)


class Task:
    """Base class of a task; a task directory's `task.py` defines one subclass with these fields set.

    `scenario_sets` maps a set name to scenarios: instances of one frozen dataclass (`scenario_type`)
    with a `name` property, whose fields say everything a problem instance needs.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    language: ClassVar[str]  # "c" (CPU, OpenMP) or "cuda": see `languages`
    header_file: ClassVar[str]  # file name, in the task directory, of the ABI header candidates include
    original_file: ClassVar[str | None]  # file name of the original kernel; None: the task has none yet
    entry: ClassVar[str]  # the kernel's extern "C" entry point
    dtype: ClassVar[str]  # element type of every tensor (DTYPES)
    scenario_type: ClassVar[type]
    scenario_sets: ClassVar[dict[str, tuple]]
    distributions: ClassVar[tuple[str, ...]] = ("normal", "shifted")  # trial t draws distributions[t % n]
    # An output is accepted when max|out - ref| <= factor * max|plain - ref| + floor, where ref is the
    # high-precision reference and plain the same computation done in the working dtype.
    tolerance_factor: ClassVar[float] = 2.0
    tolerance_floor: ClassVar[float] = 1e-5
    peak_flops: ClassVar[float]  # generous ceilings of the device: a time below the roofline is refused
    peak_bytes_per_s: ClassVar[float]

    directory: Path  # set by the loader

    # -- what the task must define ------------------------------------------------------------
    def arguments(self, scenario) -> list[Tensor | Scalar]:
        """The kernel's arguments for `scenario`, in the order of the header's parameter struct."""
        raise NotImplementedError

    def reference(self, arrays: dict, scenario, precise: bool) -> dict:
        """Every output from the inputs (the backend's arrays: numpy on the CPU, torch on CUDA), as float
        arrays: in high precision with `precise`, else plainly in the working dtype."""
        raise NotImplementedError

    def reference_at(self, scenario, picks: dict[str, np.ndarray], fetch: Callable) -> dict[str, np.ndarray]:
        """float64 values of each output at the flat indices `picks[output]`. `fetch(name, flat_indices)`
        returns the input `name` at those flat indices (float64), exactly as the kernel saw it."""
        raise NotImplementedError

    def flops(self, scenario) -> float:
        """Useful floating-point operations (for the roofline and TFLOP/s)."""
        raise NotImplementedError

    # -- what the task may override -----------------------------------------------------------
    def min_bytes(self, scenario) -> float:
        """Bytes a kernel must move at least: every tensor once."""
        return float(sum(t.size * t.element_size(self.dtype) for t in self.tensors(scenario)))

    def sample(self, scenario, rng: random.Random) -> dict[str, np.ndarray]:
        """Flat indices of the output elements checked on every timed call (a task whose elements are cheap
        to compute one at a time keeps this default; one whose rows share work picks whole rows)."""
        return {t.name: np.asarray(sorted({rng.randrange(t.size) for _ in range(SAMPLED_ELEMENTS)}), dtype=np.int64)
                for t in self.outputs(scenario)}

    def vary(self, scenario, trial: int):
        """The scenario verification trial `trial` uses (e.g. another value of a scalar)."""
        return scenario

    def baselines(self) -> dict[str, Baseline]:
        """Library implementations by name (`check --original NAME`, `--baselines`)."""
        return {}

    def reference_source(self) -> str | None:
        """What a kernel must compute, short enough for a prompt (a task made from a PyTorch module: the module);
        None where the task's own task.py says it at length."""
        return None

    def traits(self, scenarios: list) -> frozenset[str]:
        """Words that hold of the problem in `scenarios` (e.g. `attention`, `causal`, `grouped-query`): a bank
        question that `needs` a trait the task lacks is not asked of it. Default: none."""
        return frozenset()

    # -- derived ------------------------------------------------------------------------------
    @property
    def header(self) -> Path:
        return self.directory / self.header_file

    @property
    def has_original(self) -> bool:
        return self.original_file is not None

    @property
    def original(self) -> Path:
        """The original kernel's file; BadInput where a task made without one is asked for it."""
        if self.original_file is None:
            from evokernel.errors import BadInput

            raise BadInput(f"task {self.name} has no original kernel (it was made without a first kernel): "
                           f"give a kernel of your own, or let a model write one (evokernel run --model MODEL)")
        return self.directory / self.original_file

    @property
    def default_speed_reference(self) -> str:
        """What speedups are measured against unless a user says otherwise: the original kernel, or for a task
        without one its first library baseline."""
        if self.has_original or not self.library_baselines:
            return "original"
        return self.library_baselines[0]

    @property
    def backend(self) -> str:
        from evokernel.harness.languages import LANGUAGES

        return LANGUAGES[self.language].backend

    @property
    def library_baselines(self) -> tuple[str, ...]:
        return tuple(self.baselines())

    def tensors(self, scenario) -> list[Tensor]:
        return [a for a in self.arguments(scenario) if isinstance(a, Tensor)]

    def inputs(self, scenario) -> list[Tensor]:
        return [t for t in self.tensors(scenario) if not t.output]

    def outputs(self, scenario) -> list[Tensor]:
        return [t for t in self.tensors(scenario) if t.output]

    def scenarios(self, set_name: str) -> list:
        from evokernel.errors import BadInput

        if set_name == "all":
            seen: dict[str, Any] = {}
            for group in self.scenario_sets.values():
                for scenario in group:
                    seen.setdefault(scenario.name, scenario)
            return list(seen.values())
        if set_name not in self.scenario_sets:
            known = ", ".join([*self.scenario_sets, "all"])
            raise BadInput(f"task {self.name} has no scenario set '{set_name}' (known: {known})")
        return list(self.scenario_sets[set_name])

    def scenario_from(self, fields: dict):
        """A scenario back from its fields (as a request carries it)."""
        return self.scenario_type(**fields)

    def roofline_floor_ms(self, scenario) -> float:
        seconds = max(self.flops(scenario) / self.peak_flops, self.min_bytes(scenario) / self.peak_bytes_per_s)
        return seconds * 1e3


def sampled_elements(task: Task, scenario, seed: int, offsets: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The output elements checked for the call made from `seed` and `offsets`: the worker and the parent
    derive the same ones."""
    from evokernel.harness import values

    return task.sample(scenario, random.Random(values.mix(seed, *offsets) ^ 0x5EED))
