"""Tests of the ``__NAME__`` backend plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr import ConfigError
from rlvr.testing import check_backend, validate_config

NAME = "__NAME__"


@pytest.mark.parametrize("params", [{}, {"chunk_size": 2}])
def test_follows_the_plugin_contract(params):
    # Found by name through the entry point, as a config finds it (so: installed). It runs
    # the backend on a tiny random model built in a temporary directory.
    generation = check_backend(NAME, params=params)
    assert len(generation.token_ids) == len(generation.texts)


def test_usable_in_a_config():
    config = validate_config({"backend": {"name": NAME, "params": {"chunk_size": 4}}})
    assert config.backend.params.chunk_size == 4
    with pytest.raises(ConfigError, match="chunk_size"):
        validate_config({"backend": {"name": NAME, "params": {"chunk_size": 0}}})
