"""Tests of the ``__NAME__`` reward plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr import ConfigError
from rlvr.plugin import Sample
from rlvr.testing import check_reward, validate_config

from __MODULE__.params import __CLS__Params
from __MODULE__.reward import __CLS__

NAME = "__NAME__"


def test_follows_the_plugin_contract():
    # Found by name through the entry point, as a config finds it (so: installed).
    values = check_reward(NAME, params={"text": "72"})
    assert set(values) <= {0.0, 1.0} and 1.0 in values


def test_reads_a_dataset_field():
    samples = [
        Sample(completion="so it is 18", row={"answer": "18"}),
        Sample(completion="so it is 17", row={"answer": "18"}),
        Sample(completion="anything", row={"answer": ""}),
    ]
    values = check_reward(NAME, samples=samples, params={"field": "answer", "score": 2})
    assert values == [2.0, 0.0, None]


def test_scores():
    params = __CLS__Params(text="</answer>", miss_score=-1.0)
    reward = __CLS__(params)
    assert reward(Sample(completion="<answer>4</answer>")) == 1.0
    assert reward(Sample(completion="4")) == -1.0


def test_usable_in_a_config():
    config = validate_config({"rewards": [{"name": NAME, "params": {"text": "72"}}]})
    assert config.rewards[0].params.text == "72"
    with pytest.raises(ConfigError, match="texts"):
        validate_config({"rewards": [{"name": NAME, "params": {"texts": "72"}}]})
