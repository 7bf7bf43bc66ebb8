"""``length_penalty``: a penalty on the completion's TOKEN length (``sample.num_tokens``).

Mode ``overlong`` is DAPO's soft overlong punishment, with ``L`` the token count::

    0                                         if L <= max_length - buffer
    (max_length - buffer - L) / buffer * factor   if max_length - buffer < L < max_length
    -factor                                   if L >= max_length

Mode ``target``: 0 at ``target_length``, falling to ``-factor`` at ``tolerance`` tokens away
(either side), ``linear`` or ``cosine`` shaped, and clamped at ``-factor`` beyond (it never rises
again). Both modes need token lengths: a sample without ``num_tokens`` gets ``None`` (not
applicable); characters are never used as a stand-in.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from rlvr import Params, Sample

_MODE_FIELDS = {"overlong": ("max_length", "buffer"), "target": ("target_length", "tolerance")}


class LengthPenaltyParams(Params):
    """Mode and shape of the ``length_penalty`` reward (lengths in tokens)."""

    mode: Literal["overlong", "target"] = Field(
        "overlong", description="overlong: DAPO soft overlong punishment; target: peak at a length"
    )
    max_length: int | None = Field(None, gt=0, description="overlong: -factor from here (tokens)")
    buffer: int | None = Field(
        None, gt=0, description="overlong: the penalty ramps over the last `buffer` tokens"
    )
    target_length: int | None = Field(None, ge=0, description="target: the best length (tokens)")
    tolerance: int | None = Field(
        None, gt=0, description="target: -factor at this many tokens from target_length"
    )
    shape: Literal["linear", "cosine"] = Field("linear", description="target: shape of the ramp")
    factor: float = Field(1.0, ge=0, description="size of the largest penalty")

    @model_validator(mode="after")
    def _check_mode(self) -> LengthPenaltyParams:
        needed = _MODE_FIELDS[self.mode]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"mode {self.mode!r} needs {' and '.join(missing)}")
        # Fields of the other mode must stay unset (null), so a dumped config reloads as is.
        for mode, names in _MODE_FIELDS.items():
            for name in names:
                if mode != self.mode and getattr(self, name) is not None:
                    raise ValueError(f"{name} is used only by mode {mode!r}, not {self.mode!r}")
        if self.mode == "overlong" and self.shape != "linear":
            raise ValueError("shape is used only by mode 'target'")
        if self.mode == "overlong" and self.buffer >= self.max_length:  # type: ignore[operator]
            raise ValueError(
                f"buffer ({self.buffer}) must be smaller than max_length ({self.max_length}): "
                "the penalty ramps from max_length - buffer to max_length"
            )
        return self


class LengthPenaltyReward:
    """Scores a completion's token length (see the module docstring)."""

    def __init__(self, params: LengthPenaltyParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        n = sample.num_tokens
        if n is None:
            return None
        if p.mode == "overlong":
            max_length, buffer = p.max_length, p.buffer
            assert max_length is not None and buffer is not None
            if n <= max_length - buffer:
                return 0.0
            if n >= max_length:
                return -p.factor
            return (max_length - buffer - n) / buffer * p.factor
        assert p.target_length is not None and p.tolerance is not None
        x = min(1.0, abs(n - p.target_length) / p.tolerance)
        ramp = x if p.shape == "linear" else (1 - math.cos(math.pi * x)) / 2
        return -p.factor * ramp
