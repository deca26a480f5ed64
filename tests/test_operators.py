"""Operators register themselves: a registered class is all a config and the search need (its weight
accepted by name, its default weight, whether it needs a model); an unknown name is one line."""

from __future__ import annotations

import pytest

from evokernel import mutations
from evokernel.config import parse_config
from evokernel.errors import BadInput
from evokernel.mutations import Proposal, llm_operator_names, registered_operators, register
from evokernel.search.operator_contexts import configured_operators


class Rewrite:
    """A stand-in for an LLM operator in a module of its own."""

    name, arity, uses_llm = "rewrite", 1, True

    def __init__(self, config) -> None:
        self.config = config

    def __call__(self, parents, context) -> Proposal:
        return Proposal(source=parents[0].source, operator=self.name, parent_ids=[parents[0].id])


@pytest.fixture
def rewrite_registered(monkeypatch):
    monkeypatch.setattr(mutations, "_REGISTRY", registered_operators())  # every module imported: the copy holds them all
    register(default_weight=0.25)(Rewrite)


def test_a_registered_operator_is_weighted_by_name_and_needs_a_model(rewrite_registered):
    assert registered_operators()["rewrite"].default_weight == 0.25 and "rewrite" in llm_operator_names()
    config = parse_config({"task": "attention-fwd-cpu", "operators": {"rewrite": 3}}, "config.yaml")
    assert config.operators.as_dict()["rewrite"] == 3 and config.operators.as_dict()["knob-mutation"] == 1.0
    said = []
    assert "rewrite" not in configured_operators(config, said.append)  # no model: knob operators only
    assert said == ["no LLM model is configured (llm.models / --model): using the knob operators only"]
    config = parse_config({"task": "attention-fwd-cpu", "operators": {"rewrite": 3},
                           "llm": {"models": [{"model": "openai/fake"}]}}, "config.yaml")
    op, weight = configured_operators(config, said.append)["rewrite"]
    assert isinstance(op, Rewrite) and op.config is config and weight == 3


def test_a_config_keeps_the_default_weights_of_operators_it_does_not_name():
    weights = parse_config({"task": "attention-fwd-cpu", "operators": {"repair": 0}}, "c").operators.as_dict()
    assert weights == {"knob-mutation": 1.0, "knob-crossover": 0.5, "question-mutation": 2.0,
                       "question-crossover": 0.5, "repair": 0.0, "first-kernel": 0.0}


def test_an_unknown_operator_is_one_line_naming_the_known_ones():
    with pytest.raises(BadInput) as error:
        parse_config({"task": "attention-fwd-cpu", "operators": {"knob-mutaton": 1}}, "c.yaml")
    assert str(error.value) == ("c.yaml: field 'operators': unknown operator 'knob-mutaton' (known: first-kernel, "
                                "knob-crossover, knob-mutation, question-crossover, question-mutation, repair)")
