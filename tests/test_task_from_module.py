"""Tasks from PyTorch module files (the KernelBench format): `evokernel task new NAME --from-module FILE`
writes a task whose reference is the module's forward, whose parameters and integer (index) inputs are kernel
inputs; a correct C kernel passes and wrong ones (wrong weights or indices, skipped rows, a write past the
output) are rejected on each kind of module; torch.compile is a speed reference that says why it cannot run;
bad module files are one line with nothing left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from evokernel.cli import main
from evokernel.harness import get_task
from evokernel.store import Store

torch = pytest.importorskip("torch")
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


def test_an_elementwise_module_becomes_a_task_its_kernel_passes_beside_pytorch_eager(tmp_path, silu):
    result = new_task(tmp_path, "silu", *silu)
    assert result.exit_code == 0, result.output
    task = tmp_path / "silu"
    assert sorted(p.name for p in task.iterdir()) == ["config.yaml", "evk_silu.h", "module.py", "original.c", "task.py"]
    header = (task / "evk_silu.h").read_text()
    assert "const float *x;" in header and "float *out;" in header and "long long x_d0, x_d1, x_d2" in header
    report = check(tmp_path, "silu", None, "--baselines")
    assert report["correct"], report["failure"]
    assert [s["name"] for s in report["scenarios"]] == ["b4", "b16", "b32", "b64"]  # 64 / 16, / 4, / 2, / 1
    assert all(s["baselines_ms"]["torch"] > 0 and set(s["baselines_ms"]) == {"torch"} for s in report["scenarios"])
    # b4's one input rolled along its longest axis had 50 offsets for 7 rounds of 3 kernels: 2 calls a request
    # at most, each swamped by its round trip; rolled as a flat array it has 600
    assert report["scenarios"][0]["calls_per_request"] > 50 // (7 * 3)


def test_a_prompt_about_a_module_task_s_kernel_gives_the_module_and_each_scenario_s_tensor_shapes(tmp_path, silu):
    """A module task's scenario has one field (its batch): the sizes a kernel is built around are in the shapes,
    and what it computes (which axis a softmax is over) in the module."""
    from evokernel.bank import Question
    from evokernel.mutations import Parent
    from evokernel.mutations.prompts import mutation_prompt

    assert new_task(tmp_path, "silu", *silu).exit_code == 0
    report = check(tmp_path, "silu")
    task = get_task(str(tmp_path / "silu"))
    question = Question(id="where-time-goes", text="Where does the time go?", triggers=["default"], layers=["compute"])
    prompt = mutation_prompt(Parent(1, (tmp_path / "silu" / "original.c").read_text(), 1.0, report=report),
                             question, "default", task)
    assert "What it computes (the reference):" in prompt and "return x * torch.sigmoid(x)" in prompt
    assert "b4: batch=4; x [4, 3, 50], out [4, 3, 50]" in prompt
    assert "b64: batch=64; x [64, 3, 50], out [64, 3, 50]" in prompt


def test_weights_and_indices_are_inputs_of_the_header_in_the_struct_s_order(tmp_path):
    for name in ("linear-bias-gelu", "embedding-gather"):
        module = MODULES / f"{name.replace('-', '_')}.py"
        assert new_task(tmp_path, name, module, module.with_suffix(".c")).exit_code == 0
    weights = (tmp_path / "linear-bias-gelu" / "evk_linear_bias_gelu.h").read_text()
    assert "const float *x, *linear_weight, *linear_bias;" in weights
    indices = (tmp_path / "embedding-gather" / "evk_embedding_gather.h").read_text()
    assert ("  const long long *index;  // read only: indices in [0, 1000)\n"
            "  const float *position, *table_weight;  // read only\n  float *out;\n") in indices


# Wrong kernels, made from each module's correct one: (task, what is wrong, replaced text, replacement, reason).
PAST_THE_END = "  p->out[{}] = 0.0f;\n  return 0;\n}}"
WRONG_KERNELS = [
    ("silu", "skipped rows", "p->x_d0 * p->x_d1", "(p->x_d0 - 1) * p->x_d1", "unwritten"),
    ("silu", "a write past the output", "  return 0;\n}", PAST_THE_END.format("n"), "wrote outside its output"),
    ("row-softmax", "skipped rows", "r < rows;", "r < rows - 1;", "unwritten"),
    ("row-softmax", "a write past the output", "  return 0;\n}", PAST_THE_END.format("rows * columns"),
     "wrote outside its output"),
    ("layernorm", "wrong weights", "p->norm_weight[c] +", "p->norm_weight[0] +", "max error"),
    ("layernorm", "skipped rows", "r < rows;", "r < rows - 1;", "unwritten"),
    ("linear-bias-gelu", "wrong weights", "float acc = p->linear_bias[c];", "float acc = 0.0f;", "max error"),
    ("linear-bias-gelu", "transposed weights", "acc += x[k] * w[k];",
     "acc += x[k] * p->linear_weight[(k % columns) * inner + c % inner];", "max error"),
    ("linear-bias-gelu", "a write past the output", "  return 0;\n}", PAST_THE_END.format("rows * columns"),
     "wrote outside its output"),
    ("linear-residual-rmsnorm", "skipped rows", "r < rows;", "r < rows - 1;", "unwritten"),
    ("embedding-gather", "ignored indices", "p->index[t] * dim", "(t % p->table_weight_d0) * dim", "max error"),
    ("embedding-gather", "indices off by one", "p->index[t] * dim", "((p->index[t] + 1) % p->table_weight_d0) * dim",
     "max error"),
    ("embedding-gather", "skipped rows", "t < tokens;", "t < tokens - 1;", "unwritten"),
    ("embedding-gather", "a write past the output", "  return 0;\n}", PAST_THE_END.format("tokens * dim"),
     "wrote outside its output"),
]


@pytest.fixture(scope="module")
def made_task(tmp_path_factory):
    """`made_task(name)`: the folder holding task `name`, made once from its module file (the elementwise one
    from SILU_MODULE), and its correct kernel's text."""
    root = tmp_path_factory.mktemp("made")
    (root / "silu.py").write_text(SILU_MODULE)
    (root / "silu.c").write_text(SILU_KERNEL)
    kernels: dict[str, str] = {}

    def made(name: str) -> tuple[Path, str]:
        if name not in kernels:
            module = root / "silu.py" if name == "silu" else MODULES / f"{name.replace('-', '_')}.py"
            result = new_task(root, name, module, module.with_suffix(".c"))
            assert result.exit_code == 0, result.output
            kernels[name] = module.with_suffix(".c").read_text()
        return root, kernels[name]

    return made


@pytest.mark.parametrize("name, what, old, new, reason", WRONG_KERNELS, ids=[f"{c[0]}: {c[1]}" for c in WRONG_KERNELS])
def test_a_wrong_kernel_is_rejected_with_its_reason(made_task, name, what, old, new, reason):
    root, kernel = made_task(name)
    assert old in kernel
    report = check(root, name, kernel.replace(old, new, 1))
    assert not report["correct"] and reason in report["failure"], report["failure"]


def with_second_input(value: str, module: str = SILU_MODULE) -> str:
    """SILU_MODULE whose forward takes a second input `k`, `value` in get_inputs()."""
    return (module.replace("return [torch.randn(64, 3, 50)]", f"return [torch.randn(64, 3, 50), {value}]")
            .replace("def forward(self, x)", "def forward(self, x, k)"))


TABLE_MODULE = with_second_input("torch.arange(3)").replace(
    "class Model(nn.Module):", "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.table = nn.Embedding(3, 50)\n").replace("return x * torch.sigmoid(x)", "return x + self.table(k)")
BAD_MODULES = [
    *((f"no {name}", SILU_MODULE.replace(f"{name}(", f"other_{name}("), f"no {name} (a module file defines")
      for name in ("Model", "get_inputs", "get_init_inputs")),
    ("a scalar input", with_second_input("2"), "get_inputs() item 1 is a int, not a tensor"),
    ("an int8 input", with_second_input("torch.zeros(3, dtype=torch.int8)"),
     "input k is a torch.int8 tensor: an index input is int64 or int32"),
    ("an index input without a range", with_second_input("torch.zeros(3, dtype=torch.long) - 1"),
     "no range for index input k: declare index_ranges = {'k': HIGH}"),
    ("a declared range of a float input", SILU_MODULE + "\nindex_ranges = {'x': 4}\n",
     "index_ranges maps integer inputs of Model.forward to positive ints (integer inputs: none)"),
    ("a declared range past the table", TABLE_MODULE + "\nindex_ranges = {'k': 4}\n",
     "the forward fails on its largest indices (k up to 3): IndexError: index out of range"),
    ("a forward without a tensor", SILU_MODULE.replace("return x * torch.sigmoid(x)", "return 3.0"),
     "Model.forward returns float, not a tensor"),
    ("an integer output", SILU_MODULE.replace("return x * torch.sigmoid(x)", "return (x > 0).long()"),
     "Model.forward returns a torch.int64 tensor: a task's outputs are floating-point"),
    ("a forward that changes shape between calls", SILU_MODULE.replace(
        "return x * torch.sigmoid(x)",
        "self.calls = getattr(self, 'calls', 0) + 1\n        return x[..., :self.calls]"),
     "Model.forward's outputs change shape between calls on the same inputs ([(4, 3, 1)] then [(4, 3, 2)])"),
    ("a forward that needs a GPU", SILU_MODULE.replace("return x * torch.sigmoid(x)", "return x.cuda()"),
     "Model.forward fails on the inputs' shapes: AssertionError: Torch not compiled with CUDA enabled"),
    ("a model built on a GPU", SILU_MODULE.replace("def get_init_inputs():\n    return []",
                                                   "def get_init_inputs():\n    return [torch.ones(1).cuda()]"),
     "Model(*get_init_inputs()) fails: AssertionError: Torch not compiled with CUDA enabled"),
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
    (["silu", "--language", "cuda", "--dtype", "float64"], "--dtype float64: a cuda task takes float32, bfloat16"),
])
def test_bad_options_are_one_line(tmp_path, silu, args, message):
    seed = silu[1].with_suffix(".cu" if "cuda" in args else ".c")  # a seed in the language asked for
    seed.write_text(SILU_KERNEL)
    result = CliRunner().invoke(main, ["task", "new", *args, "--from-module", str(silu[0]), "--seed-kernel",
                                       str(seed), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(f"error: {message}"), result.output
    assert not (tmp_path / "out").exists()


def test_an_existing_directory_is_not_touched(tmp_path, silu):
    (tmp_path / "silu").mkdir()
    (tmp_path / "silu" / "mine.txt").write_text("keep")
    result = new_task(tmp_path, "silu", *silu)
    assert result.exit_code == 2 and "already exists" in result.output
    assert [p.name for p in (tmp_path / "silu").iterdir()] == ["mine.txt"]


def test_a_cuda_kernel_on_a_machine_without_a_gpu_is_one_line_before_anything_is_built(tmp_path, silu, monkeypatch):
    """Without a CUDA GPU: `task new --language cuda` with a first kernel stops in one line and leaves nothing; the
    task without one is written; `check` on it says the task needs a GPU (not a torch error as a rejection)."""
    import evokernel.evaluation as evaluation

    monkeypatch.setattr(evaluation, "detect_gpus", lambda: 0)
    kernel = tmp_path / "silu.cu"
    kernel.write_text("// any kernel\n")
    result = new_task(tmp_path, "silu", silu[0], kernel, "--language", "cuda")
    assert result.exit_code == 2, result.output
    assert "--language cuda: the first kernel (--seed-kernel) is checked on a CUDA GPU, and this machine has none" \
        in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "silu").exists()
    result = CliRunner().invoke(main, ["task", "new", "silu", "--from-module", str(silu[0]), "--language", "cuda",
                                       "-o", str(tmp_path / "silu")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["check", str(kernel), "--task", str(tmp_path / "silu")])
    assert result.exit_code == 2
    assert result.output.strip() == "error: task silu needs a CUDA GPU, and this machine has none"


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
    (["--seed-kernel", "x.c", "--model", "openai/fake"],
     "error: give one first kernel: --seed-kernel FILE (yours) or --model MODEL (a model writes it)"),
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
    # PyTorch's FLOP counter sees the Linear examples' matrix products: questions about them are asked there only
    traits = get_task(str(tmp_path / name)).traits([])
    assert traits == ({"matrix-product"} if name.startswith("linear") else set())


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
    (rolled,) = task.inputs(smallest)
    assert (rolled.shape, rolled.roll_axis, rolled.roll_positions) == ((4, 3, 50), None, 600)  # as a flat array
    offsets = values.call_offsets([rolled], 7, 600)
    assert len(set(offsets)) == 600


def test_an_index_input_s_range_is_declared_or_the_sample_s_and_its_values_stay_in_it(tmp_path):
    from evokernel.harness import values
    from evokernel.harness.task import Indices
    from evokernel.harness.task_from_module import inspect_module

    module = tmp_path / "indexed.py"
    module.write_text(with_second_input("torch.tensor([0, 5, 2], dtype=torch.int32)"))
    assert inspect_module(module, "c", "float32").index_inputs == {"k": ("int", 6)}  # the sample's largest + 1
    module.write_text(with_second_input("torch.tensor([0, 5, 2])") + "\nindex_ranges = {'k': 9}\n")
    assert inspect_module(module, "c", "float32").index_inputs == {"k": ("int64", 9)}
    assert inspect_module(module, "cuda", "bfloat16").index_inputs == {"k": ("int64", 9)}  # bf16 floats, int64 k
    drawn = values.numpy_input(Indices(9), np.arange(900).reshape(30, 30), 7, "shifted")
    assert drawn.dtype == np.int64 and set(np.unique(drawn)) == set(range(9))


def compile_unavailable() -> str:
    """Why torch.compile cannot run on this machine ("" where it can)."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return "TorchDynamo does not support this Python"
    return "" if shutil.which("g++") else "no C++ compiler (g++) for Inductor's CPU code"


@pytest.mark.skipif(bool(compile_unavailable()), reason=f"torch.compile cannot run here: {compile_unavailable()}")
def test_torch_compile_is_a_speed_reference_that_says_in_one_line_why_it_cannot_run(tmp_path, silu, monkeypatch):
    from evokernel.harness import get_task
    from evokernel.harness.module_task import CompileUnavailable

    assert new_task(tmp_path, "silu", *silu).exit_code == 0
    task = get_task(tmp_path / "silu")
    assert task.library_baselines == ("torch",) and "compile" in task.baselines()  # `--baselines` compiles nothing
    scenario = task.scenarios("quick")[0]
    arrays = {"x": np.random.default_rng(0).standard_normal((4, 3, 50), dtype=np.float32)}
    compiled = task.baselines()["compile"]

    def no_compiler(*args, **kwargs):
        raise RuntimeError("backend='inductor' raised:\nInvalidCxxCompiler: No working C++ compiler found\n...")

    with monkeypatch.context() as patched:
        patched.setattr(torch, "compile", no_compiler)
        with pytest.raises(CompileUnavailable) as failed:
            compiled.prepare(arrays, scenario)
    assert str(failed.value) == ("torch.compile does not run the module here: RuntimeError: InvalidCxxCompiler: "
                                 "No working C++ compiler found")
    out = compiled.run(compiled.prepare(arrays, scenario), scenario)
    assert np.allclose(out.numpy(), task.reference(arrays, scenario, precise=False)["out"], atol=1e-5)


CUDA_EXAMPLES = [("row-softmax", "row_softmax.cu"), ("layernorm", "layernorm.cu"),
                 ("linear-bias-gelu", "linear_bias_gelu.cu"), ("linear-bias-gelu", "linear_bias_gelu_wmma.cu"),
                 ("linear-residual-rmsnorm", "linear_residual_rmsnorm.cu"), ("embedding-gather", "embedding_gather.cu")]


@pytest.mark.gpu
@pytest.mark.parametrize("name, kernel", CUDA_EXAMPLES)
def test_each_cuda_example_s_first_kernel_passes_its_task_made_from_the_module(tmp_path, name, kernel):
    """The bf16 CUDA tasks `task new` writes from the example modules (weights and an int64 index input as
    inputs of the ABI) take their first kernels; an index read off by one is caught."""
    result = new_task(tmp_path, name, MODULES / f"{name.replace('-', '_')}.py", MODULES / kernel, "--language", "cuda")
    assert result.exit_code == 0, result.output
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["check", str(MODULES / kernel), "--task", str(tmp_path / name), "--no-time",
                                       "--json", str(report)])
    assert result.exit_code == 0 and json.loads(report.read_text())["correct"], result.output
    if name == "embedding-gather":
        shifted = tmp_path / "shifted.cu"
        shifted.write_text((MODULES / kernel).read_text().replace("index[token] * dim",
                                                                  "((index[token] + 1) % 1000) * dim"))
        result = CliRunner().invoke(main, ["check", str(shifted), "--task", str(tmp_path / name), "--no-time"])
        assert result.exit_code == 1 and "max error" in result.output, result.output
