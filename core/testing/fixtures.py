"""The pytest fixtures of :mod:`rlvr.testing` (``rlvr_host``, ``rlvr_host_factory``,
``rlvr_tiny_model``) and the tiny model directory they and :func:`~rlvr.testing.check_backend`
share."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

try:  # the fixtures need pytest; the checks do not
    import pytest
except ImportError:  # pragma: no cover - rlvr.testing used outside a test run
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from rlvr.api.host import Host


if pytest is not None:

    @pytest.fixture
    def rlvr_host() -> Host:
        """A fresh host with every installed plugin (the ``rlvr`` entry points)."""
        # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
        from rlvr.api.host import create_host

        return create_host()

    @pytest.fixture
    def rlvr_host_factory() -> Callable[..., Host]:
        """``make(plugins=[...], entrypoints=True)``: a fresh host per call.

        ``plugins`` are modules or objects with ``@rlvr.hookimpl`` methods, registered after
        the entry points; ``entrypoints=False`` leaves out every installed plugin (built-ins
        included).
        """

        def make(plugins: Iterable[object] = (), *, entrypoints: bool = True) -> Host:
            # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
            from rlvr.api.host import create_host

            return create_host(entrypoints=entrypoints, plugins=list(plugins))

        return make

    @pytest.fixture(scope="session")
    def rlvr_tiny_model() -> Path:
        """A tiny random Qwen2 model and tokenizer directory (built once per process, the one
        :func:`check_backend` uses by default; do not modify it)."""
        return tiny_model_dir()


@functools.cache
def tiny_model_dir() -> Path:
    """A tiny model directory built once per process (removed when the process exits)."""
    # loads torch and transformers: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.model.tiny import build_tiny_model

    root = Path(tempfile.mkdtemp(prefix="rlvr-testing-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return build_tiny_model(root / "model")
