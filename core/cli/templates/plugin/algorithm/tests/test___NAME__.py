"""Tests of the ``__NAME__`` algorithm plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr import ConfigError
from rlvr.testing import check_algorithm, validate_config

NAME = "__NAME__"


@pytest.mark.parametrize(
    "params",
    [{}, {"baseline": "median"}, {"scale": True}, {"beta": 0.04}, {"num_iterations": 2}],
)
def test_follows_the_plugin_contract(params):
    # Found by name through the entry point, as a config finds it (so: installed).
    metrics = check_algorithm(NAME, params=params)
    assert "advantages/mean" in metrics


def test_median_baseline():
    import torch
    from rlvr.plugin import RunInfo
    from rlvr.testing import synthetic_batch

    from __MODULE__.algorithm import __CLS__
    from __MODULE__.params import __CLS__Params

    params = __CLS__Params(baseline="median")
    algo = __CLS__(params, RunInfo(max_completion_length=8, num_generations=4))
    batch = synthetic_batch(params.requirements(), group_size=4)
    prepared, _ = algo.prepare(batch)
    for g in batch.group_ids.unique():
        members = batch.group_ids == g
        assert torch.allclose(
            prepared.advantages[members], batch.scores[members] - batch.scores[members].median()
        )


def test_usable_in_a_config():
    config = validate_config(
        {
            "algorithm": {"name": NAME, "params": {"baseline": "median"}},
            "training": {"num_generations": 4},
        }
    )
    assert config.algorithm.params.baseline == "median"
    with pytest.raises(ConfigError, match="num_generations"):
        validate_config({"algorithm": {"name": NAME}, "training": {"num_generations": 1}})
