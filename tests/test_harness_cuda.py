"""The harness on the CUDA task (run on a GPU machine; skipped elsewhere): the original passes,
every planted cheat is rejected for its reason, crashes and hangs are rejections."""

from __future__ import annotations

import pytest

from evokernel.harness import CheckOptions, check_kernel, check_source, get_task
from planted import CUDA, CUDA_CHEATS

pytestmark = pytest.mark.gpu

TASK = get_task("attention-fwd")
ORIGINAL = TASK.original.read_text()
QUICK = CheckOptions(scenario_set="quick", rounds=5)


def test_original_passes_quick_with_baselines():
    report = check_kernel(TASK.original, TASK, CheckOptions(scenario_set="quick", rounds=5, baselines=True))
    assert report.correct, report.failure
    assert 0.8 < report.geomean_speedup < 1.25
    assert set(report.baseline_geomeans) == {"cudnn", "flash"}
    assert any(s.baselines_ms.get("cudnn") for s in report.scenarios)


@pytest.mark.parametrize("cheat", CUDA_CHEATS, ids=lambda c: c.name)
def test_planted_cheat_is_rejected(cheat):
    report = check_source(cheat.edit(ORIGINAL), TASK, QUICK)
    if cheat.may_gain_nothing and report.correct:
        assert report.geomean_speedup < 1.25, f"{cheat.name} ({cheat.design_item}) gained {report.geomean_speedup}"
        return
    assert not report.correct, f"{cheat.name} ({cheat.design_item}) passed the gate"
    assert cheat.expected in report.failure, report.failure


def test_illegal_address_is_a_rejection():
    bad = ORIGINAL.replace("if (d < head_dim) o[((long)b", "if (d < head_dim) o[(1L << 40) + ((long)b")
    assert bad != ORIGINAL
    report = check_source(bad, TASK, QUICK)
    assert not report.correct and report.failure.startswith("d64-b2-h4-s256: illegal memory access (during"), \
        report.failure
    assert report.device and "H" in report.device  # the report names the device even for a crash


def test_a_workspace_from_the_stream_ordered_allocator_is_allowed():
    """The contract allows cudaMallocAsync; the runner's filters must not make the allocator fail."""
    workspace = CUDA.wrap("""
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  void* workspace = nullptr;
  const size_t bytes = (size_t)p->batch * p->seqlen_q * p->heads_q * sizeof(float) + (64u << 20);
  if (cudaMallocAsync(&workspace, bytes, stream) != cudaSuccess) return 5;
  if (cudaMemsetAsync(workspace, 0, bytes, stream) != cudaSuccess) return 6;
  const int rc = honest_fwd(p, stream);
  return cudaFreeAsync(workspace, stream) == cudaSuccess ? rc : 7;
}
""")
    report = check_source(workspace(ORIGINAL), TASK, QUICK)
    assert report.correct, report.failure


def test_a_call_the_runtime_refused_is_named_in_the_rejection():
    """A kernel's own error code says little; the rejection adds the CUDA runtime's last error."""
    refused = CUDA.wrap("""
extern "C" int evk_attention_fwd(const evk_attention_params* p, cudaStream_t stream) {
  void* workspace = nullptr;
  if (cudaMalloc(&workspace, (size_t)1 << 50) != cudaSuccess) return 9;
  return honest_fwd(p, stream);
}
""")
    report = check_source(refused(ORIGINAL), TASK, QUICK)
    assert not report.correct
    assert "returned error code 9 (the CUDA runtime's last error: cudaErrorMemoryAllocation" in report.failure, \
        report.failure


def test_hanging_kernel_is_killed():
    hang = ORIGINAL.replace("  const int warp = threadIdx.x / 32", "  while (clock64() >= 0) {}\n  const int warp = threadIdx.x / 32")
    report = check_source(hang, TASK, CheckOptions(scenario_set="quick", timeout_s=30))
    assert not report.correct and ("timed out" in report.failure or "time limit" in report.failure)


def test_a_failing_library_baseline_ends_the_check_with_its_own_error_in_one_line(tmp_path):
    """A library speed reference that raises ends the check with the library's error (one line, the step named),
    not with a verdict on the candidate."""
    import shutil

    task_dir = tmp_path / "attention_broken_library"
    shutil.copytree(TASK.directory, task_dir, ignore=shutil.ignore_patterns("__pycache__", "seeds"))
    source = (task_dir / "task.py").read_text()
    source = source.replace('name = "attention-fwd"', 'name = "attention-fwd-broken-library"')
    broken = '''
        def broken(prepared, s):
            raise RuntimeError("no such library here")

        return {"broken": Baseline(broken)}

    def unused_baselines(self) -> dict[str, Baseline]:'''
    source = source.replace("    def baselines(self) -> dict[str, Baseline]:", "    def baselines(self) -> dict[str, Baseline]:" + broken, 1)
    (task_dir / "task.py").write_text(source)
    report = check_kernel(TASK.original, str(task_dir), CheckOptions(scenario_set="quick", rounds=5,
                                                                      speed_reference="broken"))
    assert not report.correct and report.failure.startswith("RuntimeError: no such library here"), report.failure
    assert "\n" not in report.failure and "(during warm-up of reference on d64-" in report.failure  # its first call
