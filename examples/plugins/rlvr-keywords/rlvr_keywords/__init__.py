"""A third-party rlvr reward: the fraction of required keywords present, minus banned ones.

Install it (``pip install .``) and use it by name::

    rewards:
      - name: keywords
        params: {required: [total, answer], banned: [sorry]}
"""

from __future__ import annotations

from pydantic import Field

from rlvr import Params, Reward, Sample, hookimpl


class KeywordParams(Params):
    required: list[str] = Field(default_factory=list, description="words that earn credit")
    banned: list[str] = Field(default_factory=list, description="words that cost `penalty`")
    penalty: float = 1.0
    case_sensitive: bool = False


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


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="keywords",
            params=KeywordParams,
            factory=KeywordReward,
            description="share of required keywords present, minus a penalty for banned ones",
        )
    )
