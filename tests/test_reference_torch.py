"""The torch reference the CUDA attention task uses, checked against the CPU task's float64 numpy reference
on the same values (runs on the CPU wherever torch is installed; the GPU uses the same code)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from evokernel.harness import values  # noqa: E402
from evokernel.builtin_tasks.attention import Scenario, numpy_reference, torch_reference  # noqa: E402

SCENARIOS = [
    Scenario(2, 4, 2, 33, 57, 32, True, 0.5),  # GQA, causal with seqlen_q < seqlen_k
    Scenario(1, 2, 1, 40, 19, 16, True),  # rows with no visible key write zeros
    Scenario(1, 3, 3, 17, 17, 24, False, 1.7),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_torch_reference_matches_float64(scenario):
    generator = torch.Generator().manual_seed(0)
    s = scenario

    def draw(heads, seqlen):
        return torch.randn((s.batch, seqlen, heads, s.head_dim), generator=generator).to(torch.bfloat16)

    q, k, v = draw(s.heads_q, s.seqlen_q), draw(s.heads_kv, s.seqlen_k), draw(s.heads_kv, s.seqlen_k)
    ref, plain = torch_reference(q, k, v, s, precise=True), torch_reference(q, k, v, s, precise=False)
    exact = numpy_reference(*(t.float().numpy() for t in (q, k, v)), s, np.float64)
    assert np.max(np.abs(ref.numpy() - exact)) < 1e-5
    plain_err = np.max(np.abs(plain.numpy() - exact))
    assert 1e-4 < plain_err < 0.2  # bf16 rounding (larger for peaky softmaxes): the tolerance scales from it
    if s.causal and s.seqlen_q > s.seqlen_k:
        assert np.all(ref.numpy()[:, : s.seqlen_q - s.seqlen_k] == 0)


def test_device_comparisons_agree_with_numpy():
    from evokernel.harness.backends import cpu, cuda

    a = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    b = a + 0.01 * torch.randn(1000, generator=torch.Generator().manual_seed(2))
    a[3] = float("nan")
    gpu_side, host_side = cuda.Backend.__new__(cuda.Backend), cpu.Backend.__new__(cpu.Backend)
    assert gpu_side.count_nonfinite(a) == host_side.count_nonfinite(a.numpy()) == 1
    a[3] = 0.0
    assert gpu_side.max_abs_diff(a, b) == pytest.approx(host_side.max_abs_diff(a.numpy(), b.numpy()))
    assert gpu_side.relative_error(a, b) == pytest.approx(host_side.relative_error(a.numpy(), b.numpy()))
    picks = np.array([999, 3, 0, 3])
    in_bf16 = a.to(torch.bfloat16)
    assert np.array_equal(gpu_side.gather(in_bf16, picks), host_side.gather(in_bf16.float().numpy(), picks))


@pytest.mark.parametrize("distribution", values.DISTRIBUTIONS)
def test_torch_and_numpy_draw_the_same_inputs(distribution):
    """The parent regenerates a worker's inputs with numpy: the torch path (what the GPU runs, here on the
    CPU) must give the same bits, also after rounding to bfloat16."""
    index = np.arange(1 << 20, dtype=np.int64) * 7 + 3
    seed = values.mix(12345, 6, 789)
    by_numpy = values.numpy_draw(index, seed, distribution)
    by_torch = values.draw(torch.from_numpy(index), seed, distribution, lambda x: x.to(torch.float32)).numpy()
    assert np.array_equal(by_numpy.view(np.uint32), by_torch.view(np.uint32))
    rounded = torch.from_numpy(by_torch).to(torch.bfloat16).float().numpy()
    assert np.array_equal(values.round_to_bfloat16(by_numpy).view(np.uint32), rounded.view(np.uint32))
    assert abs(float(by_numpy.std()) - (2.0 if distribution == "shifted" else 1.0)) < 0.01


def test_both_backends_read_a_request_s_faults_alike_index_buffers_included():
    """A timed request's calls are checked from one read of the device: each call's first broken guard band and
    its outputs' non-finite counts, the same on both backends (an index buffer's canary is 1234, not 1234.5)."""
    from evokernel.harness.backends import CANARY, GUARD_ELEMENTS, Inputs, cpu, cuda
    from evokernel.harness.task import Indices, Tensor

    arguments = [Tensor("index", (8,), indices=Indices(5)), Tensor("x", (16,)), Tensor("out", (16,), output=True)]
    dtypes = {"index": np.int64, "x": np.float32, "out": np.float32}

    def call(broken: str | None, nans: int) -> Inputs:
        guarded = {t.name: np.full(t.size + 2 * GUARD_ELEMENTS, CANARY, dtype=dtypes[t.name]) for t in arguments}
        arrays = {name: buffer[GUARD_ELEMENTS:-GUARD_ELEMENTS] for name, buffer in guarded.items()}
        arrays["out"][:] = 1.0
        arrays["out"][:nans] = np.nan
        if broken:
            guarded[broken][-1] = 0
        return Inputs(None, arguments, arrays, guarded)

    calls = [call(None, 0), call("x", 0), call(None, 2), call("index", 1)]
    as_tensors = [Inputs(None, arguments, {n: torch.from_numpy(a) for n, a in c.arrays.items()},
                         {n: torch.from_numpy(b) for n, b in c.guarded.items()}) for c in calls]
    host = cpu.Backend.__new__(cpu.Backend).faults(calls)
    device = cuda.Backend.__new__(cuda.Backend).faults(as_tensors)
    assert host == device
    assert [(f.broken_guard, f.nonfinite["out"]) for f in host] == [(None, 0), ("x", 0), (None, 2), ("index", 1)]
    in_bf16 = [Inputs(None, arguments, {n: a if a.dtype == torch.int64 else a.to(torch.bfloat16)
                                        for n, a in c.arrays.items()},
                      {n: b if b.dtype == torch.int64 else b.to(torch.bfloat16) for n, b in c.guarded.items()})
               for c in as_tensors]  # CANARY rounds to 1232 in bf16, in the buffer and in the comparison alike
    assert cuda.Backend.__new__(cuda.Backend).faults(in_bf16) == device


def test_the_launch_spin_grows_on_a_late_launch_and_comes_back_down():
    """A library call queued after the device reached it is timed again with twice the spin; a run of calls
    queued in time halves it again, so one slow launch does not make every later call wait that long."""
    from evokernel.harness.backends.cuda import LAUNCH_SLACK_CYCLES, MAX_LAUNCH_SLACK_CYCLES, SLACK_SHRINK_AFTER
    from evokernel.harness.backends.cuda import LaunchSlack

    slack = LaunchSlack()
    assert [slack.taken(False) for _ in range(3)] == [False] * 3 and slack.cycles == 8 * LAUNCH_SLACK_CYCLES
    assert all(slack.taken(True) for _ in range(SLACK_SHRINK_AFTER - 1)) and slack.cycles == 8 * LAUNCH_SLACK_CYCLES
    assert slack.taken(True) and slack.cycles == 4 * LAUNCH_SLACK_CYCLES
    for _ in range(10 * SLACK_SHRINK_AFTER):
        slack.taken(True)
    assert slack.cycles == LAUNCH_SLACK_CYCLES  # never below the floor
    while slack.cycles < MAX_LAUNCH_SLACK_CYCLES:
        assert not slack.taken(False)
    assert slack.taken(False)  # at the cap a late sample stands: the call is timed, not retried forever


def test_a_requests_fault_read_names_the_first_broken_guard_and_counts_what_is_not_finite():
    """The fault read compares every guard band of one element type at once and sums each output: a call whose
    output has NaN or Inf gets its exact count, one whose finite values overflow the sum gets 0, and a changed
    band is named by the first guarded tensor it belongs to (torch on the CPU: the same operations as on a GPU)."""
    from evokernel.harness.backends import CANARY, GUARD_ELEMENTS, Inputs
    from evokernel.harness.backends.cuda import Backend
    from evokernel.harness.task import Tensor

    def call(n: int = 1000) -> Inputs:
        arguments = [Tensor("x", (n,)), Tensor("index", (n,)), Tensor("out", (n,), output=True)]
        guarded = {"x": torch.full((n + 2 * GUARD_ELEMENTS,), CANARY, dtype=torch.bfloat16),
                   "index": torch.full((n + 2 * GUARD_ELEMENTS,), int(CANARY), dtype=torch.int32),
                   "out": torch.full((n + 2 * GUARD_ELEMENTS,), CANARY, dtype=torch.bfloat16)}
        arrays = {name: buffer[GUARD_ELEMENTS:GUARD_ELEMENTS + n] for name, buffer in guarded.items()}
        arrays["out"].fill_(1.0)
        return Inputs(None, arguments, arrays, guarded)

    backend = Backend.__new__(Backend)  # no device: the fault read needs none
    calls = [call() for _ in range(4)]
    assert [(f.broken_guard, f.nonfinite) for f in backend.faults(calls)] == [(None, {"out": 0})] * 4
    calls[0].arrays["out"][:] = 3e38  # finite, but their float32 sum is not
    calls[1].guarded["index"][3] = 7
    calls[1].guarded["out"][-2] = 0
    calls[2].arrays["out"][5:9] = float("nan")
    calls[2].arrays["out"][0] = float("-inf")
    calls[3].guarded["x"][-1] = 0
    assert [(f.broken_guard, f.nonfinite) for f in backend.faults(calls)] == [
        (None, {"out": 0}), ("index", {"out": 0}), (None, {"out": 5}), ("x", {"out": 0})]
