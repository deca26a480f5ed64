"""One contract for every registered operator (as Kernel Tuner tests every strategy): it is built from a
config, declares its options so that the config can check them, and, given parents it takes, returns a
child that names it and its parents, or fails with a ProposalFailed: nothing else escapes."""

from __future__ import annotations

import os
import random
import re

import pytest

from evokernel.config import parse_config
from evokernel.errors import BadInput
from evokernel.harness import get_task
from evokernel.mutations import Context, Parent, Proposal, ProposalFailed, registered_operators
from evokernel.mutations.operators.questions import build_services
from evokernel.source import set_knobs
from evokernel.store import Store
from fake_llm_server import FakeLLMServer

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["EVK_FAKE_KEY"] = "test"
TASK = get_task("attention-fwd-cpu")
ORIGINAL = TASK.original.read_text()
OTHER = set_knobs(ORIGINAL, {"BLOCK_Q": "8", "BLOCK_K": "16"})  # same knobs, two other values
REJECTED = {"correct": False, "failure": "candidate does not compile: error: expected ';'", "scenarios": [],
            "build_log": "kernel.c:3: error: expected ';'"}
OPERATORS = sorted(registered_operators())


def config_for(name: str, server: FakeLLMServer | None = None, setting=None):
    data = {"task": TASK.name, "operators": {name: setting} if setting is not None else {}}
    if server is not None:
        data["llm"] = {"models": [{"model": "openai/fake", "api_base": server.api_base, "api_key_env": "EVK_FAKE_KEY"}],
                       "retry_backoff_s": 0, "timeout_s": 5, "max_retries": 0}
    return parse_config(data, "run.yaml")


@pytest.mark.parametrize("name", OPERATORS)
def test_every_operator_declares_itself_and_its_options(name):
    registration = registered_operators()[name]
    operator = registration.factory(config_for(name))
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", name) and operator.name == name
    assert operator.arity >= 1 and isinstance(registration.uses_llm, bool) and registration.default_weight >= 0
    names = [option.name for option in registration.options]
    assert len(set(names)) == len(names) and "weight" not in names
    for option in registration.options:
        assert option.meaning and option.problem(option.default) is None, option
        assert operator.settings[option.name] == option.default


@pytest.mark.parametrize("name", OPERATORS)
def test_the_config_checks_each_option_against_its_declaration(name):
    registration = registered_operators()[name]
    with pytest.raises(BadInput, match=rf"^run.yaml: field 'operators.{name}': no option 'colour' \(it takes: weight"):
        config_for(name, setting={"colour": 1})
    with pytest.raises(BadInput, match=rf"^run.yaml: field 'operators.{name}': weight -1 is not a number >= 0$"):
        config_for(name, setting={"weight": -1})
    for option in registration.options:
        if option.maximum is not None:
            config = config_for(name, setting={"weight": 3, option.name: option.maximum})
            assert config.operators.as_dict()[name] == 3.0
            assert registration.factory(config).settings[option.name] == option.maximum
            with pytest.raises(BadInput, match=rf"^run.yaml: field 'operators.{name}.{option.name}': .*is above its maximum"):
                config_for(name, setting={option.name: option.maximum + 1})
        if option.minimum is not None:
            with pytest.raises(BadInput, match=rf"^run.yaml: field 'operators.{name}.{option.name}': .*is below its minimum"):
                config_for(name, setting={option.name: option.minimum - 1})
        with pytest.raises(BadInput, match=rf"^run.yaml: field 'operators.{name}.{option.name}': expected"):
            config_for(name, setting={option.name: "many"})


@pytest.mark.parametrize("name", OPERATORS)
def test_given_parents_it_takes_an_operator_returns_a_child_that_names_it(name, tmp_path):
    child = set_knobs(ORIGINAL, {"THREADS": "2"})
    answers = [f"The loop can be split over threads.\n```c\n{child}```\n"] * 2
    with FakeLLMServer(answers) as server, Store(tmp_path / "run", create=True) as store:
        config = config_for(name, server)
        registration = registered_operators()[name]
        operator = registration.factory(config)
        services = build_services(config, store) if registration.uses_llm else {}
        parents = [Parent(1, ORIGINAL, None, report=REJECTED), Parent(2, OTHER, None, report=REJECTED)]
        context = Context(rng=random.Random(3), task=TASK, store=store, services=services)
        try:
            proposal = operator(parents[:operator.arity], context)
        except ProposalFailed as failure:
            pytest.fail(f"{name} refused parents it should take: {failure}")
    assert isinstance(proposal, Proposal) and proposal.operator == name
    assert proposal.parent_ids == [1, 2][:operator.arity] and proposal.source not in (ORIGINAL, OTHER)
