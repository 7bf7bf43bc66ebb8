"""The literal types of the functional API's options, and their allowed values for checks."""

from __future__ import annotations

from typing import Literal

AdvantageScale = Literal["group", "batch", "none"]
KLKind = Literal["k1", "k2", "k3"]
AggregationMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]

PolicyLevel = Literal["token", "sequence"]

_SCALES = ("group", "batch", "none")
_KL_KINDS = ("k1", "k2", "k3")
_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
