"""The harness protocol: what the parent asks of a worker (`CheckRequest`), the messages a worker may send
back (`MESSAGE_FIELDS`), and how timed calls are numbered by phase. The parent (`check`, `supervisor`,
`judge`) and the worker both speak it; neither needs the other's module, and the judge never imports the
code that starts kernels.

Trust: the worker never loads candidate code (every built kernel runs in a `runner` process; see
`runner.py`), and the parent still re-checks what it can of the worker's report (`judge`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, field, fields

FULL_CHECKS_PER_SCENARIO = 2  # timed calls verified in full, chosen at random
# Call numbers of each timing phase start at its base: the interleaved timing, the re-timing of a kernel
# below the roofline, and the screening of a candidate alone against speed-reference times reused from an
# earlier interleaved check on this GPU.
PHASE_CALLS = {"timing": 1_000_000, "re-timing": 2_000_000, "screening": 3_000_000}
MAX_BATCH = 256  # calls in one timed request (runner.c's MAX_CALLS)


class Rejected(Exception):
    """The candidate failed a check; the message says which."""


class Channel:
    """The worker's end of the harness channel: one JSON line a message, to the parent."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_inheritable(fd, False)  # never handed on to a runner: only the worker writes the channel

    def send(self, kind: str, **data) -> None:
        line = (json.dumps({"type": kind, **data}) + "\n").encode()
        while line:
            line = line[os.write(self.fd, line):]


@dataclass
class CheckRequest:
    """Everything a worker needs for one check; sent as one JSON line."""

    backend: str
    task: str  # the task's directory
    scenarios: list[dict]
    seed: int
    speed_reference: str = "original"  # "original", "file" (speed_reference.so) or a library baseline
    baselines: list[str] = field(default_factory=list)
    trials: int = 3
    rounds: int = 7
    warmup: int = 2
    timing_budget_ms: float | None = None  # per scenario; slow kernels get fewer rounds
    keep_going: bool = False
    time: bool = True
    tolerance: dict[str, float] = field(default_factory=lambda: {"factor": 2.0, "floor": 1e-5})
    floors_ms: list[float] = field(default_factory=list)  # roofline floor of each scenario
    min_limit_s: float = 10.0  # the least time a step may take before the worker is killed
    reference_ms: list[float] | None = None  # reused speed-reference medians: screen the candidate alone
    confirm_above: float | None = None
    library: str = ""  # where the built kernels are (set by the supervisor)
    self_destruct_s: float = 3600.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> CheckRequest:
        data = json.loads(line)
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def timing_call(round_index: int, kernel_index: int, phase: str) -> int:
    return PHASE_CALLS[phase] + 16 * round_index + kernel_index


def net_ms(per_call_ms: list[float], overhead_ms: list[float], batch: int) -> float:
    """A kernel's time from its requests' per-call shares: the median, less its share of the median round
    trip of an empty request (measured in the same rounds; none where calls are timed in-process)."""
    overhead = float(statistics.median(overhead_ms)) if overhead_ms else 0.0
    return net_call_ms(float(statistics.median(per_call_ms)), overhead, batch)


def net_call_ms(share_ms: float, overhead_ms: float, batch: int) -> float:
    """One call's time from its share of a request: less its share of the round trip, and never below a tenth
    of the share (a round trip measured longer than a whole request is noise, not a faster kernel)."""
    return max(share_ms - overhead_ms / batch, share_ms / 10)


def call_phase(call: int) -> str | None:
    """The timing phase a call number belongs to (None: no timing phase's)."""
    return max(((base, phase) for phase, base in PHASE_CALLS.items() if call >= base), default=(0, None))[1]


def must_confirm(screened_ms: list[float], request: CheckRequest) -> bool:
    """Whether screened candidate times call for the interleaved timing (the rule the parent checks too)."""
    reused, threshold = request.reference_ms, request.confirm_above
    if any(ms < floor for ms, floor in zip(screened_ms, request.floors_ms)):
        return True
    speedup = math.exp(sum(math.log(r / ms) for r, ms in zip(reused, screened_ms)) / len(screened_ms))
    return threshold is not None and speedup >= threshold


# The fields each kind of message must carry, with their types: anything else is a corrupted channel.
NUMBER = (int, float)
MESSAGE_FIELDS: dict[str, dict[str, type | tuple]] = {
    "hello": {"device": str}, "step": {"text": str, "limit_s": NUMBER}, "done": {"seconds": dict},
    "error": {"error": str}, "rejected": {"index": int, "error": str}, "verified": {"index": int},
    "trial": {"index": int, "call": int, "rows": dict}, "full-check": {"index": int, "call": int},
    "call": {"index": int, "call": int, "kernel": str, "ms": NUMBER, "offsets": list, "batch": int},
    "overhead": {"index": int, "phase": str, "ms": NUMBER},
}


def well_formed(data: dict, scenario_count: int) -> bool:
    """Whether a message has a known type, its fields with their types, and a scenario index in range."""
    kinds = MESSAGE_FIELDS.get(data["type"])
    if kinds is None or not all(isinstance(data.get(name), kind) for name, kind in kinds.items()):
        return False
    return "index" not in kinds or 0 <= data["index"] < scenario_count
