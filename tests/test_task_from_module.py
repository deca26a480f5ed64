"""Tasks from PyTorch module files (the KernelBench format): `evokernel task new NAME --from-module FILE`
writes a task whose reference is the module's forward and whose parameters are kernel inputs; a correct C
kernel passes, wrong ones are rejected, and bad module files are one line with nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.store import Store

pytest.importorskip("torch")
MODULES = Path(__file__).resolve().parent.parent / "examples" / "modules"

SILU_MODULE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)

def get_inputs():
    return [torch.randn(64, 3, 50)]

def get_init_inputs():
    return []
'''
SILU_KERNEL = '''#include <math.h>
#include "evk_silu.h"
int evk_silu(const evk_silu_params* p) {
  const long long n = p->x_d0 * p->x_d1 * p->x_d2;
  for (long long i = 0; i < n; ++i) p->out[i] = p->x[i] / (1.0f + expf(-p->x[i]));
  return 0;
}
'''


def new_task(tmp_path: Path, name: str, module: Path, seed: Path, *extra: str):
    return CliRunner().invoke(main, ["task", "new", name, "--from-module", str(module), "--seed-kernel", str(seed),
                                     "-o", str(tmp_path / name), *extra])


def check(tmp_path: Path, name: str, kernel_text: str | None = None, *extra: str) -> dict:
    task = tmp_path / name
    kernel = task / "original.c"
    if kernel_text is not None:
        kernel = tmp_path / f"{name}-candidate.c"
        kernel.write_text(kernel_text)
    report = tmp_path / f"{name}.json"
    result = CliRunner().invoke(main, ["check", str(kernel), "--task", str(task), "--json", str(report),
                                       "--scenarios", "scaled", *extra])
    assert result.exit_code in (0, 1), result.output
    return json.loads(report.read_text())


@pytest.fixture
def silu(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "silu.py").write_text(SILU_MODULE)
    (tmp_path / "silu.c").write_text(SILU_KERNEL)
    return tmp_path / "silu.py", tmp_path / "silu.c"


def test_an_elementwise_module_becomes_a_task_its_kernel_passes_and_a_skipped_row_does_not(tmp_path, silu):
    result = new_task(tmp_path, "silu", *silu)
    assert result.exit_code == 0, result.output
    task = tmp_path / "silu"
    assert sorted(p.name for p in task.iterdir()) == ["config.yaml", "evk_silu.h", "module.py", "original.c", "task.py"]
    header = (task / "evk_silu.h").read_text()
    assert "const float *x;" in header and "float *out;" in header and "long long x_d0, x_d1, x_d2" in header
    report = check(tmp_path, "silu", None, "--baselines")
    assert report["correct"], report["failure"]
    assert [s["name"] for s in report["scenarios"]] == ["b4", "b16", "b32", "b64"]  # 64 / 16, / 4, / 2, / 1
    assert all(s["baselines_ms"]["torch"] > 0 for s in report["scenarios"])
    skipped = SILU_KERNEL.replace("p->x_d0 * p->x_d1 * p->x_d2", "(p->x_d0 - 1) * p->x_d1 * p->x_d2")
    assert not check(tmp_path, "silu", skipped)["correct"]


def test_a_reduction_module_rejects_a_write_past_its_output(tmp_path):
    result = new_task(tmp_path, "row-softmax", MODULES / "row_softmax.py", MODULES / "row_softmax.c")
    assert result.exit_code == 0, result.output
    assert check(tmp_path, "row-softmax")["correct"]
    past_the_end = (MODULES / "row_softmax.c").read_text().replace(
        "  return 0;\n}", "  p->out[rows * columns] = 0.0f;\n  return 0;\n}")
    report = check(tmp_path, "row-softmax", past_the_end)
    assert not report["correct"] and "wrote outside its output" in report["failure"], report["failure"]


def test_a_module_with_weights_passes_them_as_inputs_and_rejects_a_kernel_that_ignores_one(tmp_path):
    result = new_task(tmp_path, "linear-bias-gelu", MODULES / "linear_bias_gelu.py", MODULES / "linear_bias_gelu.c")
    assert result.exit_code == 0, result.output
    header = (tmp_path / "linear-bias-gelu" / "evk_linear_bias_gelu.h").read_text()
    assert "const float *x, *linear_weight, *linear_bias;" in header
    assert check(tmp_path, "linear-bias-gelu")["correct"]
    no_bias = (MODULES / "linear_bias_gelu.c").read_text().replace("float acc = p->linear_bias[c];", "float acc = 0.0f;")
    assert not check(tmp_path, "linear-bias-gelu", no_bias)["correct"]
    transposed = (MODULES / "linear_bias_gelu.c").read_text().replace(
        "acc += x[k] * w[k];", "acc += x[k] * p->linear_weight[(k % columns) * inner + c % inner];")
    assert not check(tmp_path, "linear-bias-gelu", transposed)["correct"]


BAD_MODULES = [
    ("no Model", SILU_MODULE.replace("class Model(", "class Other("), "no Model (a module file defines"),
    ("a scalar input", SILU_MODULE.replace("return [torch.randn(64, 3, 50)]", "return [torch.randn(64, 3, 50), 2]")
     .replace("def forward(self, x)", "def forward(self, x, k)"), "get_inputs() item 1 is a int, not a tensor"),
    ("an index input", SILU_MODULE.replace("return [torch.randn(64, 3, 50)]",
                                           "return [torch.randn(64, 3, 50), torch.arange(3)]")
     .replace("def forward(self, x)", "def forward(self, x, index)"), "integer inputs are not supported yet"),
    ("a forward without a tensor", SILU_MODULE.replace("return x * torch.sigmoid(x)", "return 3.0"),
     "Model.forward returns float, not a tensor"),
    ("too large", SILU_MODULE.replace("torch.randn(64, 3, 50)", "torch.empty(1 << 20, 4096)")
     .replace("return [torch.empty", "return [torch.empty"), "MiB a c task holds"),
    ("does not load", SILU_MODULE + "\nraise RuntimeError('broken')\n", "does not load: RuntimeError: broken"),
]


@pytest.mark.parametrize("what, module_text, message", BAD_MODULES, ids=[b[0] for b in BAD_MODULES])
def test_a_bad_module_file_is_one_line_and_leaves_nothing_behind(tmp_path, silu, what, module_text, message):
    silu[0].write_text(module_text)
    result = new_task(tmp_path, "silu", *silu)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and message in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["silu.c", "silu.py"]  # no task, no scratch folder


@pytest.mark.parametrize("args, message", [
    (["attention-fwd"], "task name 'attention-fwd' is a built-in task's"),
    (["Bad_Name"], "task name 'Bad_Name': lowercase words joined by hyphens"),
    (["silu", "--dtype", "bfloat16"], "--dtype bfloat16: a c task takes float32"),
])
def test_bad_options_are_one_line(tmp_path, silu, args, message):
    result = CliRunner().invoke(main, ["task", "new", *args, "--from-module", str(silu[0]), "--seed-kernel",
                                       str(silu[1]), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(f"error: {message}"), result.output
    assert not (tmp_path / "out").exists()


def test_an_existing_directory_is_not_touched(tmp_path, silu):
    (tmp_path / "silu").mkdir()
    (tmp_path / "silu" / "mine.txt").write_text("keep")
    result = new_task(tmp_path, "silu", *silu)
    assert result.exit_code == 2 and "already exists" in result.output
    assert [p.name for p in (tmp_path / "silu").iterdir()] == ["mine.txt"]


def test_a_seed_that_does_not_fit_the_header_is_named_and_leaves_nothing(tmp_path, silu):
    silu[1].write_text(SILU_KERNEL.replace("p->x_d2", "p->x_d3"))  # the module's input has three sizes
    result = new_task(tmp_path, "silu", *silu)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --seed-kernel {silu[1]}: does not compile: original.c:")
    assert "x_d3" in result.output and "evk_silu.h" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["silu.c", "silu.py"]


def test_a_model_writes_the_first_kernel_and_a_rejected_one_goes_back_with_its_reason(tmp_path, silu):
    from fake_llm_server import FakeLLMServer

    wrong = SILU_KERNEL.replace("p->x_d0 * p->x_d1 * p->x_d2", "p->x_d1 * p->x_d2")  # the first row only
    answers = [f"A first version.\n```c\n{wrong}```\n", f"Every element now.\n```c\n{SILU_KERNEL}```\n"]
    with FakeLLMServer(answers) as server:
        result = CliRunner().invoke(main, ["task", "new", "silu", "--from-module", str(silu[0]), "--model",
                                           "openai/fake", "--api-base", server.api_base, "-o", str(tmp_path / "silu")])
        prompts = [request["messages"][0]["content"] for request in server.requests]
    assert result.exit_code == 0, result.output
    assert (tmp_path / "silu" / "original.c").read_text() == SILU_KERNEL
    assert "first kernel, attempt 1: rejected" in result.output and "first kernel, attempt 2: correct" in result.output
    assert len(prompts) == 2 and "return x * torch.sigmoid(x)" in prompts[0] and "long long x_d0, x_d1, x_d2" in prompts[0]
    assert "Your previous kernel, which the harness rejected" in prompts[1] and wrong.strip() in prompts[1]
    assert "b4: wrote NaN/Inf or left output out unwritten at 450 of 600 elements" in prompts[1]


def test_a_model_without_a_correct_kernel_leaves_nothing(tmp_path, silu):
    from fake_llm_server import FakeLLMServer

    with FakeLLMServer(["No code here, sorry.", "Still none."]) as server:
        result = CliRunner().invoke(main, ["task", "new", "silu", "--from-module", str(silu[0]), "--model",
                                           "openai/fake", "--api-base", server.api_base, "--attempts", "2",
                                           "-o", str(tmp_path / "silu")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == ("error: --model openai/fake: no correct first kernel in 2 attempts "
                                                      "(last: the answer holds no kernel: no code block and no "
                                                      "SEARCH/REPLACE edits in the answer)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["silu.c", "silu.py"]


@pytest.mark.parametrize("args, message", [
    ([], "error: give the first kernel: --seed-kernel FILE (yours) or --model MODEL (a model writes it)"),
    (["--model", "files"], "error: --model files: its answers come within a run; give --seed-kernel FILE"),
])
def test_the_first_kernel_must_come_from_somewhere_that_can_give_it_now(tmp_path, silu, args, message):
    result = CliRunner().invoke(main, ["task", "new", "silu", "--from-module", str(silu[0]), *args,
                                       "-o", str(tmp_path / "silu")])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith(message), result.output
    assert not (tmp_path / "silu").exists()


@pytest.mark.parametrize("module", sorted(MODULES.glob("*.py")), ids=lambda path: path.stem)
def test_every_example_module_makes_a_task_its_first_c_kernel_passes(tmp_path, module):
    name = module.stem.replace("_", "-")
    result = new_task(tmp_path, name, module, module.with_suffix(".c"))
    assert result.exit_code == 0, result.output
    report = check(tmp_path, name)
    assert report["correct"], report["failure"]


def test_a_short_search_on_a_module_task_whose_first_kernel_a_model_wrote(tmp_path, silu, local_ray, monkeypatch):
    from fake_llm_server import FakeLLMServer

    variants = [SILU_KERNEL.replace("  for (long long i", f"  const int unroll_{n} = {n};\n  (void)unroll_{n};\n"
                                                        "  for (long long i") for n in range(1, 9)]
    answers = [f"```c\n{SILU_KERNEL}```\n"] + [f"A variant.\n```c\n{v}```\n" for v in variants]
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(answers) as server:
        made = CliRunner().invoke(main, ["task", "new", "silu", "--from-module", str(silu[0]), "--model", "openai/fake",
                                         "--api-base", server.api_base])
        assert made.exit_code == 0, made.output
        searched = CliRunner().invoke(main, ["run", "silu/config.yaml", "--budget", "3", "--model", "openai/fake",
                                             "--api-base", server.api_base, "--no-llm-check", "--runs-dir", "runs"])
        prompts = [request["messages"][0]["content"] for request in server.requests[1:]]
    assert searched.exit_code == 0, searched.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    with Store(run_dir, readonly=True) as store:
        rows = [row for row in store.individuals() if row.status in ("correct", "rejected")]
    assert len(rows) == 3 and rows[0].operator == "seed" and rows[0].status == "correct"
    assert any(row.status == "correct" and row.operator.startswith("question") for row in rows[1:])
    assert prompts and "b4" in prompts[0] and "long long x_d0, x_d1, x_d2" in prompts[0]  # results and contract


def test_timed_calls_never_see_the_same_inputs_twice_even_at_a_small_leading_size(tmp_path, silu):
    from evokernel.harness import get_task, values

    assert new_task(tmp_path, "silu", *silu).exit_code == 0
    task = get_task(tmp_path / "silu")
    (smallest,) = [s for s in task.scenarios("quick") if s.batch == 4]
    rolled = [(t.shape, t.roll_axis) for t in task.inputs(smallest)]
    assert rolled == [((4, 3, 50), 2)]
    offsets = values.call_offsets(rolled, 7, 30)
    assert len(set(offsets)) == 30
