"""What a timed request holds: calls on fresh inputs (the parent regenerates exactly what each backend's roll put
where, as a flat array by default or along `Tensor.roll_axis`), and as many calls as the kernel's first estimate
asks for."""

from __future__ import annotations

import numpy as np
import pytest

from evokernel.harness import values
from evokernel.harness.task import Tensor

SHAPE = (3, 5, 7)


@pytest.mark.parametrize("axis", [None, 0, 2])
@pytest.mark.parametrize("roll", [0, 4, 101])
def test_the_parent_finds_each_element_where_the_backends_roll_put_it(axis, roll):
    drawn = np.arange(np.prod(SHAPE)).reshape(SHAPE)
    flat = np.array([0, 17, 52, 104], dtype=np.int64)
    source = values.rolled_source(SHAPE, axis, roll, flat)
    assert np.array_equal(np.roll(drawn, roll, axis=axis).reshape(-1)[flat], drawn.reshape(-1)[source])  # CPU
    torch = pytest.importorskip("torch")
    rolled = torch.roll(torch.from_numpy(drawn), roll, dims=axis)  # the CUDA backend's roll, on the host here
    assert np.array_equal(rolled.reshape(-1).numpy()[flat], drawn.reshape(-1)[source])


def test_a_flat_roll_has_an_offset_per_element_and_twins_never_share_one():
    x, y = Tensor("x", SHAPE), Tensor("y", SHAPE)
    assert (x.roll_positions, Tensor("z", SHAPE, roll_axis=1).roll_positions) == (105, 5)
    offsets = values.call_offsets([x, y], seed=3, calls=100)
    assert len(set(offsets)) == 100 and all(a != b for a, b in offsets)
    assert all(0 <= a < 105 and 0 <= b < 105 for a, b in offsets)


class _Backend:
    """Requests of one call that take the given times in turn; CPU's batching rule (2 ms a request)."""

    def __init__(self, *times_ms: float) -> None:
        self.times, self.requests = list(times_ms), 0

    def time_calls(self, kernel, requests) -> float:
        self.requests += 1
        return self.times.pop(0)

    @staticmethod
    def batch_size(call_ms: float) -> int:
        return max(1, min(256, round(2.0 / call_ms)))


@pytest.mark.parametrize("times, expected, requests", [
    ((2.8, 0.02, 0.02), 0.02, 2),   # a descheduled first request: tried again, batched after all
    ((2.8, 2.9, 2.7), 2.7, 3),      # a kernel that is that slow: three requests, no more
    ((0.02, 5.0), 0.02, 1),         # short enough to batch: the batched estimate that follows refines it
    ((40.0, 1.0), 40.0, 1),         # a slow kernel: not timed again for its estimate
])
def test_a_first_estimate_is_not_one_unlucky_request(times, expected, requests):
    from evokernel.harness.backends import single_call_ms

    backend = _Backend(*times)
    assert single_call_ms(backend, kernel=None, inputs=None) == expected and backend.requests == requests
