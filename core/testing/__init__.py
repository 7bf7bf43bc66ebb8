"""Test helpers for rlvr plugins (``rlvr.testing``): pytest fixtures and conformance checks.

rlvr registers this package with pytest through pytest's own entry point (``pytest11``, named
``rlvr.testing`` after the package, so that ``-p rlvr.testing`` or ``pytest_plugins =
["rlvr.testing"]`` on top of it is harmless; ``-p no:rlvr.testing`` disables it), so in any
project where rlvr is installed the fixtures are there without a ``conftest.py``:

- ``rlvr_host``: a fresh :class:`rlvr.api.host.PluginHost` with every installed plugin (entry
  points).
- ``rlvr_host_factory``: ``make(plugins=[...], entrypoints=True)`` builds hosts, e.g. with an
  in-process plugin object and without the installed ones (``entrypoints=False``).
- ``rlvr_tiny_model``: a directory holding a tiny random model (built once per process by
  :func:`rlvr.model.tiny.build_tiny_model`; the one :func:`check_backend` uses by default).

The checks are plain functions a plugin's own tests call; each takes the registered record or
its name (looked up among the installed plugins) and raises :class:`ConformanceError` (an
``AssertionError``) that says what is wrong and how to fix it:

- :func:`check_reward`: the params model rejects unknown keys and survives the round trip a
  dumped config makes; the factory pickles by reference (as the reward workers need) and
  builds; the reward returns a finite float or None for every sample. Returns the values.
- :func:`check_algorithm`: builds it with a :class:`~rlvr.api.runtime.RunInfo`, runs ``select``,
  ``prepare`` and ``loss`` on a synthetic :class:`~rlvr.api.runtime.RolloutBatch` holding only
  the tensors its requirements ask for; the loss must be finite, differentiable, zero-gradient
  on padding, and additive over micro-batches.
- :func:`check_backend`: builds it on a tiny model and checks that ``generate`` returns a
  well-formed :class:`~rlvr.api.runtime.Generation` (counts, group layout, lengths, EOS and
  truncation flags, texts, logprobs as its capabilities declare).
- :func:`check_environment`: the params model's defaults validate; the environment builds, and
  scripted assistant messages drive episodes on a few rows: ``start`` returns an
  :class:`~rlvr.api.runtime.EpisodeStart` with messages (and valid tool schemas), ``respond``
  an :class:`~rlvr.api.runtime.EnvResponse` with finite named rewards, ``close`` works even
  right after ``start``, and two episodes run concurrently do not change each other (state
  lives in ``state``, not on the object). Returns the transcripts.
- :func:`check_data_source`: each split holds rows whose prompt is text or chat messages, the
  same rows on every load (a resumed run loads them again), the eval split shares no prompt
  with the training one, and an unknown split is one :class:`rlvr.RlvrError`. Returns the rows.
- :func:`validate_config`: a config dict validated against the installed plugins.

Loading this package is cheap (no torch): pytest loads it in every test session of an
environment where rlvr is installed, so what loads pydantic, torch or transformers (the host,
the records, the config, the model) is imported inside the checks and fixtures that use it.
Each plugin kind's checker is a module of its own (``reward``, ``algorithm``, ``backend``,
``environment``, ``data_source``), next to what they share (``conformance``) and the fixtures
(``fixtures``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from rlvr.testing import backend
from rlvr.testing.algorithm import check_algorithm, synthetic_batch
from rlvr.testing.backend import check_backend
from rlvr.testing.config import validate_config
from rlvr.testing.conformance import ConformanceError
from rlvr.testing.data_source import check_data_source
from rlvr.testing.environment import check_environment
from rlvr.testing.fixtures import tiny_model_dir
from rlvr.testing.reward import SAMPLE_FIELDS, check_reward, default_samples

# pytest finds a plugin's fixtures among its module's names (the pytest11 entry point names
# this package), so the fixtures are imported here.
# Without pytest (the checks used outside a test run) there are none.
with contextlib.suppress(ImportError):
    from rlvr.testing.fixtures import rlvr_host, rlvr_host_factory, rlvr_tiny_model  # noqa: F401

#: Prompts :func:`check_backend` generates for (different lengths, one with a chat turn). Named
#: here, not only imported, so that the API reference shows this comment.
PROMPTS = backend.PROMPTS


def __getattr__(name: str) -> Any:
    if name == "SAMPLES":
        return default_samples()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PROMPTS",
    "SAMPLE_FIELDS",
    "ConformanceError",
    "check_algorithm",
    "check_backend",
    "check_data_source",
    "check_environment",
    "check_reward",
    "default_samples",
    "synthetic_batch",
    "tiny_model_dir",
    "validate_config",
]
