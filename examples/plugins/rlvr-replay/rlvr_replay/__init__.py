"""A third-party rlvr backend: replay completions from a JSONL file.

The package has the layout of rlvr's own plugin families: this module registers the plugin
(cheap: ``rlvr plugins`` imports it), ``params.py`` holds the params model and ``generator.py``
the generator, imported by its ``LazyFactory`` when a run builds it.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.plugin import Backend, Capabilities, LazyFactory, hookimpl
from rlvr_replay.params import ReplayParams


@hookimpl
def rlvr_register_backends(register):
    register(
        Backend(
            name="replay",
            params=ReplayParams,
            factory=LazyFactory("rlvr_replay.generator:ReplayGenerator"),
            description="completions replayed from a JSONL file (offline runs, debugging)",
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
        )
    )


@hookimpl
def rlvr_validate_config(config):
    backend = getattr(config, "backend", None)
    params = getattr(backend, "params", None)
    if getattr(backend, "name", None) != "replay" or not isinstance(params, ReplayParams):
        return []
    if not Path(params.path).is_file():
        return [("backend.params.path", f"no such file: {params.path!r}")]
    return []
