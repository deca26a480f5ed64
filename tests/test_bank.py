"""The question bank: format and loader errors, the built-in bank, lint rules, `evokernel bank list/add/lint`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evokernel.bank import LAYERS, TRIGGERS, lint_questions, load_bank, shape_problems
from evokernel.bank.lint import GPU_WORDS, similarity
from evokernel.bank.questions import Question, load_file
from evokernel.cli import main
from evokernel.errors import BadInput


def write_bank(directory: Path, entries: list[dict], name: str = "mine.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump({"questions": entries}))
    return path


GOOD = {"id": "epilogue-cost", "text": "Does the conversion of the output to bf16 cost more than one percent of the time?",
        "triggers": ["default"], "layers": ["numerics"]}


def test_builtin_bank_is_large_covers_every_trigger_and_layer_and_passes_lint():
    bank = load_bank()
    assert len(bank) >= 40
    assert {t for q in bank for t in q.triggers} == set(TRIGGERS)
    assert set(LAYERS) <= {layer for q in bank for layer in q.layers}
    assert lint_questions(list(bank), bank.files) == []
    assert all(bank.files[q.id].parent.name == "builtin" for q in bank)


@pytest.mark.parametrize("entry, expected", [
    ({**GOOD, "triggers": ["sometimes"]}, "question 'epilogue-cost': field 'triggers.0'"),
    ({**GOOD, "id": "Bad Id"}, "question 'Bad Id': field 'id'"),
    ({k: v for k, v in GOOD.items() if k != "text"}, "question 'epilogue-cost': field 'text'"),
    ({**GOOD, "colour": "red"}, "field 'colour'"),
    ({**GOOD, "layers": ["Memory!"]}, "field 'layers'"),
    ({"text": "What?", "triggers": ["default"]}, "question #1: field 'id'"),
])
def test_loader_errors_name_file_question_and_field(tmp_path, entry, expected):
    path = write_bank(tmp_path, [entry])
    with pytest.raises(BadInput) as info:
        load_file(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_loader_rejects_bad_yaml_wrong_shape_and_duplicate_ids(tmp_path):
    bad = tmp_path / "a" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text("questions: [unclosed\n")
    with pytest.raises(BadInput, match="bad.yaml.*not valid YAML"):
        load_bank([bad.parent], builtin=False)
    wrong = write_bank(tmp_path / "b", [])
    wrong.write_text("- id: x\n")
    with pytest.raises(BadInput, match="one key 'questions'"):
        load_file(wrong)
    write_bank(tmp_path / "c", [{**GOOD, "id": "barrier-waits"}])
    with pytest.raises(BadInput, match="field 'id': already defined in .*stagnation.yaml"):
        load_bank([tmp_path / "c"])
    with pytest.raises(BadInput, match="bank directory not found"):
        load_bank([tmp_path / "missing"])


@pytest.mark.parametrize("text, reason", [
    ("Make it faster.", "is a command"),
    ("Make the kernel faster by using tensor cores?", "is a command"),
    ("Why not use tensor cores for the second matrix product?", "'why not'"),
    ("Have you tried a larger tile for the key dimension?", "'have you tried'"),
    ("The kernel wastes time in the softmax rescaling step.", "does not start like a question"),
    ("Is the kernel bound by the memory bandwidth or not", "does not end with '?'"),
    ("Is it fast?", "too short"),
    ("Is " + "the kernel and " * 30 + "fast?", "too long"),
])
def test_lint_refuses_non_questions(text, reason):
    assert any(reason in r for r in shape_problems(text)), shape_problems(text)


def test_lint_accepts_questions_with_lead_ins_and_flags_near_duplicates():
    assert shape_problems("In the causal scenarios, which tiles are computed but fully masked?") == []
    near = Question(id="near", text="Are you winning on clock cycles or only wall-clock time?", triggers=["default"],
                    layers=["measurement"])
    bank = load_bank()
    problems = lint_questions([*bank, near], bank.files)
    assert [p.question_id for p in problems] == ["near"]
    assert "near-duplicates" in problems[0].reason and "clock-cycles-or-wall-time" in problems[0].reason
    assert similarity(near.text, bank.get("clock-cycles-or-wall-time").text) >= 0.6
    assert similarity(near.text, bank.get("barrier-waits").text) < 0.2


def test_cli_add_list_lint_round_trip(tmp_path):
    runner = CliRunner()
    bank_dir = tmp_path / "mybank"
    text = "Does the conversion of the output to bf16 cost more than one percent of the time?"
    result = runner.invoke(main, ["bank", "add", "--bank", str(bank_dir), "--text", text, "--trigger", "stagnation",
                                  "--layer", "numerics", "--id", "epilogue-cost"])
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((bank_dir / "epilogue-cost.yaml").read_text())
    assert written == {"questions": [{"id": "epilogue-cost", "text": text, "triggers": ["stagnation"],
                                      "layers": ["numerics"]}]}
    listed = runner.invoke(main, ["bank", "list", "--bank", str(bank_dir), "--trigger", "stagnation"],
                           env={"COLUMNS": "300"})
    assert listed.exit_code == 0 and "epilogue-cost" in listed.output and "barrier-waits" in listed.output
    assert "clock-cycles-or-wall-time" not in listed.output  # not a stagnation question
    linted = runner.invoke(main, ["bank", "lint", "--bank", str(bank_dir)])
    assert linted.exit_code == 0 and "55 questions, no problems" in linted.output
    again = runner.invoke(main, ["bank", "add", "--bank", str(bank_dir), "--text", text, "--id", "other-id"])
    assert again.exit_code == 2 and "duplicates question 'epilogue-cost'" in again.output


def test_cli_add_refuses_a_command_with_a_clear_reason_and_writes_nothing(tmp_path):
    result = CliRunner().invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", "Make it faster."])
    assert result.exit_code == 2
    assert "refused" in result.output and "is a command" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "b").exists()
    bad_trigger = CliRunner().invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", GOOD["text"],
                                            "--trigger", "someday"])
    assert bad_trigger.exit_code == 2 and "field 'triggers.0'" in bad_trigger.output


def test_cli_lint_exits_1_with_reasons(tmp_path):
    write_bank(tmp_path, [GOOD, {**GOOD, "id": "copy"}, {"id": "cmd", "text": "Make it faster.", "triggers": ["default"],
                                                         "layers": ["compute"]}])
    result = CliRunner().invoke(main, ["bank", "lint", "--bank", str(tmp_path), "--no-builtin"])
    assert result.exit_code == 1
    assert "question 'copy': duplicates question 'epilogue-cost'" in result.output
    assert "question 'cmd': is a command" in result.output and "mine.yaml" in result.output


def test_layers_are_a_fixed_set(tmp_path):
    result = CliRunner().invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", GOOD["text"],
                                       "--layer", "vibes"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "layer 'vibes' is not one of memory, compute" in result.output and not (tmp_path / "b").exists()
    path = write_bank(tmp_path / "c", [{**GOOD, "layers": ["vibes"]}])
    linted = CliRunner().invoke(main, ["bank", "lint", "--bank", str(tmp_path / "c")])
    assert linted.exit_code == 2 and str(path) in linted.output and "layer 'vibes'" in linted.output


def test_near_duplicates_are_found_after_folding_synonyms():
    first = "Is the softmax maximum computed twice for each row?"
    second = "Is the softmax max computed twice per row?"
    different = "Is the output tile written twice for each row?"
    assert similarity(first, second) >= 0.6 and similarity(first, different) < 0.6
    questions = [Question(id=f"q-{n}", text=text, triggers=["default"], layers=["numerics"])
                 for n, text in enumerate([first, second, different])]
    problems = lint_questions(questions)
    assert [(p.question_id, p.reason.split(" question")[0]) for p in problems] == [
        ("q-1", "near-duplicates (1.00 similar)")]
    assert "'q-0'" in problems[0].reason


def test_lint_compares_only_candidate_pairs(monkeypatch):
    """Many different questions: the near-duplicate search does not compare every pair."""
    from evokernel.bank import lint

    calls = []
    jaccard = lint._jaccard
    monkeypatch.setattr(lint, "_jaccard", lambda a, b: calls.append(1) or jaccard(a, b))
    words = [f"w{n}" for n in range(400)]
    questions = [Question(id=f"q-{n}", text=f"Does the {words[n % 400]} {words[(7 * n) % 400]} "
                                           f"{words[(13 * n + 1) % 400]} stage {n} wait?", triggers=["default"],
                          layers=["memory"])
                 for n in range(3000)]
    lint_questions(questions)
    assert len(calls) < 20 * len(questions)  # every pair would be about 4.5 million


def test_a_question_file_above_the_size_limit_is_refused_in_one_line(tmp_path):
    from evokernel.bank.questions import MAX_FILE_BYTES

    entry = {**GOOD, "notes": "x" * 1000}
    path = write_bank(tmp_path, [{**entry, "id": f"q-{n}"} for n in range(MAX_FILE_BYTES // 1000 + 10)])
    result = CliRunner().invoke(main, ["bank", "list", "--bank", str(tmp_path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert str(path) in result.output and "more than a question file may hold" in result.output


def test_gpu_only_questions_are_tagged_and_never_asked_of_a_cpu_task():
    import random

    from evokernel.bank import QuestionPolicy, Subject

    bank = load_bank()
    for question in bank:
        if GPU_WORDS.search(question.text) or "gpu" in question.text.lower():
            assert question.devices == ["gpu"], question.id
    assert all(bank.for_trigger(trigger, Subject("cpu")) for trigger in TRIGGERS)  # every trigger still has some
    rng = random.Random(0)
    policy = QuestionPolicy(bank, subject=Subject("cpu"))
    asked = {policy.choose(trigger, rng).id for trigger in TRIGGERS for _ in range(200)}
    assert asked and all(bank.get(q).applies_to(Subject("cpu")) and not bank.get(q).devices for q in asked)
    gpu = QuestionPolicy(bank, subject=Subject("gpu"))
    assert {gpu.choose("default", rng).id for _ in range(500)} & {q.id for q in bank if q.devices == ["gpu"]}


def test_run_services_choose_questions_for_the_tasks_device(tmp_path):
    from evokernel.config import RunConfig
    from evokernel.mutations.operators.questions import build_services
    from evokernel.store import Store

    llm = {"models": [{"model": "openai/fake", "api_base": "http://127.0.0.1:9/v1"}]}
    with Store(tmp_path / "run", create=True) as store:
        assert build_services(RunConfig(task="attention-fwd-cpu", llm=llm), store)["policy"].subject.device == "cpu"
        assert build_services(RunConfig(task="attention-fwd", llm=llm), store)["policy"].subject.device == "gpu"


def test_questions_about_traits_a_task_lacks_are_never_asked(tmp_path):
    """A search of `fa3-2k` (no grouped-query scenario) was asked how K and V tiles are shared between the heads of
    a group, and a CPU RMSNorm about causal tiles: a question's `needs` must all be traits of the task in the run's
    scenarios."""
    import random

    from evokernel.config import RunConfig
    from evokernel.mutations.operators.questions import build_services
    from evokernel.store import Store

    llm = {"models": [{"model": "openai/fake", "api_base": "http://127.0.0.1:9/v1"}]}
    bank = load_bank()
    needing = {q.id: set(q.needs) for q in bank if q.needs}
    assert {"gqa-kv-reuse", "masked-tiles-computed", "softmax-share-of-iteration"} <= set(needing)
    task_dir = Path(__file__).parents[1] / "examples" / "tasks" / "rmsnorm_cpu"
    with Store(tmp_path / "run", create=True) as store:
        policies = {name: build_services(RunConfig(task=task, scenarios=scenarios, llm=llm), store)["policy"]
                    for name, task, scenarios in [("grid", "attention-fwd-cpu", "grid"),
                                                  ("gqa", "attention-fwd-cpu", "gqa"),
                                                  ("rmsnorm", str(task_dir), "quick")]}
    assert policies["grid"].subject.traits == {"attention", "matrix-product", "causal"}
    assert policies["gqa"].subject.traits == {"attention", "matrix-product", "causal", "grouped-query"}
    assert policies["rmsnorm"].subject.traits == frozenset()
    rng = random.Random(1)
    asked = {name: {policy.choose(trigger, rng).id for trigger in TRIGGERS for _ in range(300)}
             for name, policy in policies.items()}
    assert "gqa-kv-reuse" in asked["gqa"] and "gqa-kv-reuse" not in asked["grid"]
    assert "masked-tiles-computed" in asked["grid"]
    assert not asked["rmsnorm"] & set(needing) and asked["rmsnorm"]


def test_needs_round_trip_listing_by_task_and_validation(tmp_path):
    text = "Is each K and V tile of a grouped-query head group read from memory once, or once per query head?"
    runner = CliRunner()
    added = runner.invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", text, "--layer", "memory",
                                 "--needs", "grouped-query", "--id", "group-reads"])
    assert added.exit_code == 0, added.output
    assert load_bank([tmp_path / "b"], builtin=False).get("group-reads").needs == ["grouped-query"]
    listed = runner.invoke(main, ["bank", "list", "--no-builtin", "--bank", str(tmp_path / "b"), "--task",
                                  "attention-fwd-cpu", "--json"])
    assert [q["id"] for q in json.loads(listed.output)] == ["group-reads"]
    cpu_bank = runner.invoke(main, ["bank", "list", "--no-builtin", "--bank", str(tmp_path / "b"), "--task",
                                    str(Path(__file__).parents[1] / "examples" / "tasks" / "rmsnorm_cpu"), "--json"])
    assert cpu_bank.exit_code == 0 and json.loads(cpu_bank.output) == []
    wrong_device = runner.invoke(main, ["bank", "list", "--task", "attention-fwd-cpu", "--device", "gpu"])
    assert wrong_device.exit_code == 2 and "runs on a cpu" in wrong_device.output
    path = write_bank(tmp_path / "c", [{**GOOD, "needs": ["Grouped Query"]}])
    with pytest.raises(BadInput, match="field 'needs'.*'Grouped Query' is not a lowercase word"):
        load_file(path)


def test_devices_field_round_trip_and_validation(tmp_path):
    result = CliRunner().invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", GOOD["text"],
                                       "--layer", "numerics", "--device", "gpu", "--id", "epilogue-cost"])
    assert result.exit_code == 0, result.output
    assert load_bank([tmp_path / "b"], builtin=False).get("epilogue-cost").devices == ["gpu"]
    path = write_bank(tmp_path / "c", [{**GOOD, "devices": ["tpu"]}])
    with pytest.raises(BadInput, match="field 'devices.0'"):
        load_file(path)


def test_spelling_variants_and_short_forms_are_near_duplicates(tmp_path):
    """'vectorise' and 'vectorize', 'head dim' and 'head dimension' say the same thing: a question that differs
    from one in the bank only by them is refused."""
    first = "Does vectorizing the loads over the head dimension change the kernel's memory throughput?"
    again = "Does vectorising the loads over the head dim change the kernel's memory throughput?"
    runner = CliRunner()
    added = runner.invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", first, "--layer", "memory"])
    assert added.exit_code == 0, added.output
    refused = runner.invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", again, "--layer", "memory"])
    assert refused.exit_code == 2 and "near-duplicates (1.00 similar) question" in refused.output, refused.output
    assert len(list((tmp_path / "b").glob("*.yaml"))) == 1


def test_a_question_about_gpu_hardware_is_for_gpu_tasks_only(tmp_path):
    """A CPU task was asked about "global memory": the words of GPU hardware need devices: [gpu]."""
    text = "Does the kernel read each input byte from global memory exactly once per output tile?"
    runner = CliRunner()
    refused = runner.invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", text, "--layer", "memory"])
    assert refused.exit_code == 2 and "speaks of GPU hardware ('global memory')" in refused.output
    added = runner.invoke(main, ["bank", "add", "--bank", str(tmp_path / "b"), "--text", text, "--layer", "memory",
                                 "--device", "gpu"])
    assert added.exit_code == 0, added.output
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "q.yaml").write_text(yaml.safe_dump({"questions": [
        {"id": "warps-idle", "text": "How long do the warps wait at the barrier before each tile is ready?",
         "triggers": ["default"], "layers": ["pipeline"]}]}))
    problems = [str(p) for p in lint_questions(load_bank([tmp_path / "c"], builtin=False))]
    assert any("speaks of GPU hardware ('warps')" in p for p in problems), problems
