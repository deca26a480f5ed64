"""The rolls that give every timed call fresh inputs: the parent regenerates exactly what each backend's roll put
where, as a flat array (the default) and along one axis (`Tensor.roll_axis`)."""

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
