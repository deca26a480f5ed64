"""Triggers, the re-check of suspicious gains, the Thompson-sampling policy, `bank stats` and `bank review`."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from click.testing import CliRunner

from evokernel.bank import QuestionPolicy, TriggerMonitor, load_bank, prior_from_runs
from evokernel.search.recheck import recheck_options, recheck_reason
from evokernel.cli import main
from evokernel.config import TriggerConfig
from evokernel.harness import CheckOptions
from evokernel.lineage.statistics import questions_over_runs
from evokernel.mutations import Proposal
from evokernel.store import Store
from bank_helpers import make_run


def test_stagnation_fires_after_n_evaluations_and_ends_with_a_new_best(tmp_path):
    with Store(tmp_path / "run", create=True) as store:
        monitor = TriggerMonitor(TriggerConfig(stagnation_evaluations=3), store)
        assert monitor.observe(1, None, 1.0) == [] and monitor.active() == "default"
        fired = [monitor.observe(i, 1.0, 0.9) for i in range(2, 8)]
        assert fired == [[], [], ["stagnation"], [], [], ["stagnation"]]
        assert monitor.active() == "stagnation" and monitor.active() == "stagnation"  # persists while stalled
        monitor.observe(8, 1.0, 1.2)
        assert monitor.active() == "default"
        events = store.trigger_events()
    assert [(e["kind"], e["evaluation"], e["individual_id"]) for e in events] == [("stagnation", 4, 4),
                                                                                  ("stagnation", 7, 7)]


def test_declared_limit_and_suspicious_gain_are_one_shot_and_recorded(tmp_path):
    limit = Proposal(source="x", operator="question-mutation", parent_ids=[1], llm_call_id=5, declared_limit=True)
    with Store(tmp_path / "run", create=True) as store:
        monitor = TriggerMonitor(TriggerConfig(suspicious_gain=1.5, propose_questions=False), store)
        monitor.observe(1, None, 1.0)
        assert monitor.observe(2, 1.0, 0.9, limit) == ["declared-limit"]
        assert monitor.observe(3, 1.0, 1.6) == ["suspicious-gain"]
        assert [monitor.active(), monitor.active(), monitor.active()] == ["suspicious-gain", "declared-limit",
                                                                         "default"]
        monitor.declared_limit(limit)  # a declared limit that was not evaluated (unchanged kernel)
        assert monitor.active() == "declared-limit"
        kinds = [(e["kind"], e["individual_id"]) for e in store.trigger_events()]
    assert kinds == [("declared-limit", 2), ("suspicious-gain", 3), ("declared-limit", None)]


def test_suspicious_gains_and_roofline_flags_need_a_recheck_with_more_trials_and_a_new_seed():
    config = TriggerConfig(suspicious_gain=1.5, recheck_trials=7)
    assert recheck_reason(1.0, 1.6, None, config) and recheck_reason(1.0, 1.4, None, config) is None
    # the reason names the ratio that made the gain suspicious, not the child's own speedup
    assert recheck_reason(0.62, 1.004, None, config) == "1.62x its parent (1.004 against 0.620; suspicious from 1.5x)"
    assert recheck_reason(1.0, 1.1, {"suspicious": True}, config) == "a scenario faster than the roofline"
    assert recheck_reason(None, None, None, config) is None and recheck_reason(None, 3.0, {"suspicious": False}, config) is None
    base = CheckOptions(trials=3, seed=1234, scenario_set="all")
    options = [recheck_options(base, config, random.Random(i)) for i in range(20)]
    assert all(o.trials == 7 and o.seed != 1234 and o.scenario_set == "all" for o in options)
    assert len({o.seed for o in options}) == 20 and base.trials == 3


def test_policy_prefers_questions_that_paid_and_honours_the_trigger(tmp_path):
    bank = load_bank()
    earlier = make_run(tmp_path / "earlier", [("barrier-waits", 1.3)] * 8 + [("between-tiles", 0.8)] * 8)
    prior = prior_from_runs([earlier])
    assert prior == {"barrier-waits": (8, 8), "between-tiles": (8, 0)}
    rng = random.Random(0)
    picks = Counter(QuestionPolicy(bank, prior).choose("stagnation", rng).id for _ in range(300))
    assert picks.most_common(1)[0][0] == "barrier-waits" and picks["between-tiles"] < 10
    assert all("stagnation" in bank.get(q).triggers for q in picks)
    unseeded = Counter(QuestionPolicy(bank).choose("stagnation", rng).id for _ in range(300))
    assert len(unseeded) == len(bank.for_trigger("stagnation"))  # no prior: every allowed question gets tried
    with Store(earlier, readonly=True) as live:  # the live run's outcomes count like a prior
        live_picks = Counter(QuestionPolicy(bank).choose("stagnation", rng, live).id for _ in range(300))
    assert live_picks.most_common(1)[0][0] == "barrier-waits"


def test_answers_that_changed_nothing_count_against_their_question(tmp_path):
    """An answer that gave no kernel (`Change: none`, a known kernel again) is a try that did not pay: the policy
    counts it as `bank stats` does (wins and losses), so a question whose answers change nothing is drawn less.
    Calls without an answer (an error, a prompt still open) count for neither."""
    from evokernel.bank.payoffs import outcome_counts
    from evokernel.store import LLMCall

    run = make_run(tmp_path / "run", [("barrier-waits", 1.3), ("between-tiles", 1.3)])
    with Store(run) as store:
        for _ in range(6):
            store.add_llm_call(LLMCall(model="files", prompt="p", response="Change: none.", question_id="between-tiles"))
        store.add_llm_call(LLMCall(model="files", prompt="p", error="waits", question_id="barrier-waits"))
        assert outcome_counts(store) == {"barrier-waits": (1, 1), "between-tiles": (7, 1)}
        assert QuestionPolicy(load_bank()).beliefs(store) == {"barrier-waits": (1, 0), "between-tiles": (1, 6)}
    stats = questions_over_runs([run]).set_index("question_id")
    assert stats.loc["between-tiles", ["asked", "better"]].tolist() == [7, 1]
    assert stats.loc["barrier-waits", ["asked", "better"]].tolist() == [1, 1]


def test_a_question_already_put_about_a_kernel_is_not_put_about_it_again_while_others_remain(tmp_path):
    """Its answer would be the same: questions answered about these kernels (crossover parents in any order) or
    waiting as open prompts are drawn only when the trigger allows no other."""
    from evokernel.store import LLMCall, OpenPrompt

    bank = load_bank()
    allowed = {q.id for q in bank.for_trigger("stagnation")}
    run = make_run(tmp_path / "run", [("barrier-waits", 1.3)])
    with Store(run) as store:
        for question_id in sorted(allowed)[:-2]:
            store.add_llm_call(LLMCall(model="m", prompt="p", response="r", question_id=question_id, parent_ids=[2, 1]))
        store.add_prompt(OpenPrompt(id="p1", operator="question-mutation", prompt="p", created_at=0.0,
                                    question_id=sorted(allowed)[-2], parent_ids=[1, 2]))
        store.add_llm_call(LLMCall(model="m", prompt="p", response="r", question_id=sorted(allowed)[-1],
                                   parent_ids=[1]))  # another parent: does not count for [1, 2]
        asked = store.questions_asked_of([1, 2])
    assert asked == set(sorted(allowed)[:-1])
    policy, rng = QuestionPolicy(bank), random.Random(0)
    assert {policy.choose("stagnation", rng, avoid=asked).id for _ in range(50)} == {sorted(allowed)[-1]}
    assert len({policy.choose("stagnation", rng, avoid=allowed).id for _ in range(200)}) > 1  # none left: any


def test_bank_stats_over_runs(tmp_path):
    first = make_run(tmp_path / "a", [("barrier-waits", 1.2), ("barrier-waits", None), ("between-tiles", 0.9),
                                      ("barrier-waits", 1.25)])
    second = make_run(tmp_path / "b", [("barrier-waits", 1.5)], seed_fitness=1.0)
    frame = questions_over_runs([first, second]).set_index("question_id")
    assert frame.loc["barrier-waits", ["asked", "correct", "better"]].tolist() == [4, 3, 3]
    assert frame.loc["barrier-waits", "mean_gain"] == pytest.approx((0.2 + 0.25 + 0.5) / 3)
    assert frame.loc["barrier-waits", "median_gain"] == pytest.approx(0.25)  # over both runs' children
    assert frame.loc["between-tiles", ["asked", "correct", "better"]].tolist() == [1, 1, 0]
    assert frame.loc["between-tiles", "mean_gain"] == pytest.approx(-0.1)
    result = CliRunner().invoke(main, ["bank", "stats", str(first), str(second)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "barrier-waits" in line)
    assert line.split("\t")[1:6] == ["4", "3", "3", "+31.7%", "+25.0%"]  # piped: tab-separated, one line per question
    assert result.output.splitlines()[0].split("\t") == ["question", "asked", "correct", "better", "mean gain",
                                                          "median gain", "text"]
    as_json = CliRunner().invoke(main, ["bank", "stats", str(first), str(second), "--json"])
    rows = {row["question_id"]: row for row in json.loads(as_json.output)}
    assert (rows["barrier-waits"]["asked"], rows["between-tiles"]["mean_gain"]) == (4, pytest.approx(-0.1))


def test_bank_stats_with_nothing_asked_says_so_in_one_line(tmp_path):
    run = make_run(tmp_path / "a", [])
    result = CliRunner().invoke(main, ["bank", "stats", str(run)])
    assert result.exit_code == 0
    assert result.output.count("\n") == 1 and result.output.startswith("no question asked yet in 1 run(s)")
    assert json.loads(CliRunner().invoke(main, ["bank", "stats", str(run), "--json"]).output) == []


def test_a_persons_question_without_a_layer_is_accepted_only_with_one(tmp_path):
    """A question asked with `evokernel ask` and no --layer has none; accepting it as it is would write a
    question the next `bank lint` refuses."""
    run = make_run(tmp_path / "run", [])
    text = "Does every warp read the same K row from shared memory at the same time?"
    with Store(run) as store:
        store.add_proposed_question("same-k-row-0a1b", text, ["stagnation"], [], 7)
    runner, bank_dir = CliRunner(), tmp_path / "mybank"
    refused = runner.invoke(main, ["bank", "review", str(run), "--accept", "same-k-row-0a1b", "--bank", str(bank_dir)])
    assert refused.exit_code == 2 and "has no layer tag: give --layer" in refused.output
    assert not (bank_dir.exists() and any(bank_dir.glob("*.yaml")))
    accepted = runner.invoke(main, ["bank", "review", str(run), "--accept", "same-k-row-0a1b", "--layer", "memory",
                                    "--bank", str(bank_dir)])
    assert accepted.exit_code == 0, accepted.output
    accepted_question = load_bank([bank_dir], builtin=False).get("same-k-row-0a1b")
    assert accepted_question.layers == ["memory"] and accepted_question.devices == ["gpu"]  # it speaks of warps
    lint = runner.invoke(main, ["bank", "lint", "--bank", str(bank_dir)])
    assert lint.exit_code == 0, lint.output


def test_bank_review_accepts_into_a_user_bank_only_when_asked(tmp_path):
    run = make_run(tmp_path / "run", [])
    text = "Does every warp read the same K row from shared memory at the same time?"
    with Store(run) as store:
        store.add_proposed_question("same-k-row-0a1b", text, ["stagnation"], ["memory"], 7)
        store.add_proposed_question("make-it-faster-ffff", "Make it faster?", ["default"], [], 8)
    runner, bank_dir = CliRunner(), tmp_path / "mybank"
    shown = runner.invoke(main, ["bank", "review", str(run)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "same-k-row-0a1b" in shown.output and "proposed" in shown.output
    assert not bank_dir.exists()
    refused = runner.invoke(main, ["bank", "review", str(run), "--accept", "make-it-faster-ffff", "--bank", str(bank_dir)])
    assert refused.exit_code == 2 and "is a command" in refused.output
    database = {path.name: path.read_bytes() for path in run.iterdir() if path.name.startswith("lineage.db")}
    accepted = runner.invoke(main, ["bank", "review", str(run), "--accept", "same-k-row-0a1b",
                                    "--reject", "make-it-faster-ffff", "--bank", str(bank_dir)], env={"COLUMNS": "250"})
    assert accepted.exit_code == 0, accepted.output
    assert load_bank([bank_dir], builtin=False).get("same-k-row-0a1b").text == text
    # only the user's bank was written: the run's database is as it was
    assert {path.name: path.read_bytes() for path in run.iterdir() if path.name.startswith("lineage.db")} == database
    with Store(run, readonly=True) as store:
        assert {q["status"] for q in store.proposed_questions()} == {"proposed"}
    statuses = runner.invoke(main, ["bank", "review", str(run), "--bank", str(bank_dir)]).output
    rows = {line.split("\t")[0]: line.split("\t")[1] for line in statuses.splitlines()[1:]}
    assert rows == {"same-k-row-0a1b": "accepted", "make-it-faster-ffff": "rejected"}
    lint = runner.invoke(main, ["bank", "lint", "--bank", str(bank_dir)])
    assert lint.exit_code == 0, lint.output
    missing = runner.invoke(main, ["bank", "review", str(run), "--reject", "nope"])
    assert missing.exit_code == 2 and "no proposed question 'nope'" in missing.output
    no_bank = runner.invoke(main, ["bank", "review", str(run), "--reject", "make-it-faster-ffff"])
    assert no_bank.exit_code == 2 and "give --bank DIR" in no_bank.output

