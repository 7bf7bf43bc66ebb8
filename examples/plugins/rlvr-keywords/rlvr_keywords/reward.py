"""The ``keywords`` reward, imported by its ``LazyFactory`` when a run builds it."""

from __future__ import annotations

from rlvr.plugin import Sample
from rlvr_keywords.params import KeywordParams


class KeywordReward:
    """Score = share of required words present - penalty * (any banned word present)."""

    def __init__(self, params: KeywordParams) -> None:
        self.params = params

    def _norm(self, text: str) -> str:
        return text if self.params.case_sensitive else text.lower()

    def __call__(self, sample: Sample) -> float | None:
        text = self._norm(sample.completion)
        required = [self._norm(w) for w in self.params.required]
        score = sum(w in text for w in required) / len(required) if required else 0.0
        if any(self._norm(w) in text for w in self.params.banned):
            score -= self.params.penalty
        return score
