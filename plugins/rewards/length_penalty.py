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

from rlvr.plugin import Sample
from rlvr.plugins.rewards.params import LengthPenaltyParams


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
