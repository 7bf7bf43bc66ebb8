"""``steps``: does the completion compute the reference solution's intermediate results?

A correctness reward that pays 2% of a small model's samples gives almost no signal, and the
rewards that check only format or arithmetic get satisfied without reading the question (a
copied ``#### 10``, a ``3 * 3 = 9`` under every question). The intermediate results of the
question's own worked solution are a denser signal that cannot be copied: GSM8K's
``Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs ... 9 * 2 = <<9*2=18>>18`` has the steps {9, 18},
and a completion that writes ``16 - 3 - 4 = 9`` has one of them.

Both sides are read by :func:`rlvr.rewards.calculations.calculation_results`: the values reached by
a written calculation that holds, so a wrong calculation that happens to end in a reference value
(``16 - 4 = 9``) counts for nothing. The score is ``hits / max(len(reference), len(own))``: the
share of the reference's steps reached, and no more than the share of the completion's own results
that are reference steps, so padding a solution with extra calculations lowers it.
The gold solution scores 1.0 against itself. ``None`` (not applicable) when the reference
writes no calculation.
"""

from __future__ import annotations

import functools

from rlvr._builtin import calculation_results, row_field
from rlvr.plugin import Sample
from rlvr.plugins.rewards.params import StepsParams


class StepsReward:
    """Share of the reference solution's intermediate results the completion reaches."""

    def __init__(self, params: StepsParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        reference = _reference_steps(row_field(sample.row, self.params.gold_field))
        if not reference:
            return None
        own = calculation_results(sample.completion)
        return len(reference & own) / max(len(reference), len(own))


@functools.lru_cache(maxsize=1024)
def _reference_steps(solution: str) -> frozenset[float]:
    """A group's completions share one reference: read it once per worker, not once each."""
    return frozenset(calculation_results(solution))
