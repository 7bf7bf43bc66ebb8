"""``numbers``: a fast numeric check of the answer (no sympy, no math-verify).

The prediction is extracted by the ordered ``strategies`` (default: the answer block first);
the ``first`` or ``last`` number in it (:func:`rlvr.rewards.extract.find_numbers`: ``1,080``,
``-3``, ``$5``, ``50%``, ``\\frac{1}{2}``), or ``any`` of them (with the ``text`` strategy: the
gold anywhere in the answer), is compared with the gold (``row[gold_field]``, GSM8K's
``#### N`` detected). It is correct when
``|pred - gold| <= max(tolerance, rel_tolerance * |gold|)``.

``no_answer`` when nothing is extracted or the extraction holds no number. Returns ``None``
(not applicable) when the gold is not a number; a row without ``gold_field`` is an error.
"""

from __future__ import annotations

from rlvr._builtin import find_numbers, parse_number
from rlvr.plugin import Sample, gold_from_row
from rlvr.plugins.rewards.params import NumbersParams


class NumbersReward:
    """Scores the number in the extracted answer against the gold number."""

    def __init__(self, params: NumbersParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        gold = parse_number(gold_from_row(sample.row, p.gold_field), percent=p.percent)
        if gold is None:
            return None
        found = p.extract(sample.completion)
        numbers = find_numbers(found.text, percent=p.percent) if found else []
        if not numbers:
            return p.no_answer
        tol = max(p.tolerance, p.rel_tolerance * abs(gold))
        if p.position == "any":
            ok = any(abs(n.value - gold) <= tol for n in numbers)
        else:
            ok = abs(numbers[0 if p.position == "first" else -1].value - gold) <= tol
        return p.correct if ok else p.wrong
