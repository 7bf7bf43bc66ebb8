"""The literal types of the functional API's options, and their allowed values for checks."""

from __future__ import annotations

from typing import Literal, get_args

AdvantageScale = Literal["group", "batch", "none"]
KLKind = Literal["k1", "k2", "k3"]
AggregationMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]

PolicyLevel = Literal["token", "sequence"]

#: The allowed values of each option, for the functions' argument checks.
ADVANTAGE_SCALES: tuple[str, ...] = get_args(AdvantageScale)
KL_KINDS: tuple[str, ...] = get_args(KLKind)
AGGREGATION_MODES: tuple[str, ...] = get_args(AggregationMode)
