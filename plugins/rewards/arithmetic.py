"""``arithmetic``: is every calculation the completion writes out right?

A small model's wrong GSM8K answers are mostly its own arithmetic ("16 * 5 = 72"), and a
correctness reward that is 1 for 2% of completions says almost nothing about it. Every written
calculation can be checked, so this reward gives a signal on nearly every completion. How a
calculation is read and checked: :mod:`rlvr.rewards.calculations`.

Scores: ``correct`` when at least one calculation is found and all hold, ``wrong`` when any
fails, ``no_calculation`` when there is none. All-or-nothing on purpose: a fraction of right
links would pay for padding a wrong solution with trivial right ones.

It checks arithmetic, not reasoning, and a policy can satisfy it without reasoning: in an hour
of GRPO on SmolLM2-135M (weight 0.5 beside format rewards and ``answer`` at 2.0) the model
learnt to write ``3 * 3 = 9`` under every question. Use it to measure, or to train only where
something else pays for using the problem's numbers.
"""

from __future__ import annotations

from rlvr._builtin import link_holds, written_calculations
from rlvr.plugin import Sample
from rlvr.plugins.rewards.params import ArithmeticParams


class ArithmeticReward:
    """Scores whether every calculation written in the completion is right."""

    def __init__(self, params: ArithmeticParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float:
        verdicts = [
            link_holds(chain[i], chain[i + 1])
            for chain in written_calculations(sample.completion)
            for i in range(len(chain) - 1)
        ]
        checked = [v for v in verdicts if v is not None]
        if not checked:
            return self.params.no_calculation
        return self.params.correct if all(checked) else self.params.wrong
