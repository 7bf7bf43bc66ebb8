"""The error of an evaluation that cannot run as asked."""

from __future__ import annotations

from rlvr.api.errors import RlvrError


class EvalError(RlvrError, ValueError):
    """The evaluation cannot run as asked (bad k, split, metric, checkpoint...)."""


__all__ = ["EvalError"]
