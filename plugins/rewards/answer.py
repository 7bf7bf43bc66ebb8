"""``answer``: is the final answer mathematically correct?

1. The gold is ``row[gold_field]`` (GSM8K's ``#### N`` detected automatically); the prediction
   is extracted by the ordered ``strategies`` of :func:`rlvr.rewards.extract.extract_answer`.
2. When both read as plain numbers (:func:`rlvr.rewards.extract.parse_number`: commas, signs, ``$``,
   ``%``, units, fractions) they are compared numerically, fast, without sympy.
3. Otherwise math-verify decides (symbolic answers: ``7\\pi``, ``\\sqrt2``, sets, ``x=5``): both
   sides have their tags stripped and are wrapped in ``\\boxed{}`` first (a bare gold loses
   information), gold parsed first. math-verify runs with integer
   timeouts (``signal.alarm``): this path must run in a main thread, as reward workers do; a
   timeout or a math-verify error counts as "not equal".

Scores: ``correct``; ``stripped_match`` instead when the correct answer came with whitespace
around it (``<SOLUTION> 18 </SOLUTION>``, Unsloth's "equal after stripping spaces" tier);
the first ``close`` tier (smallest ``rel_tol`` first) whose ``|pred - gold| <= rel_tol * |gold|``
for a wrong numeric answer; ``wrong``; ``no_answer`` when no strategy finds an answer.
Returns ``None`` (not applicable) only when the gold itself cannot be parsed; a row without
``gold_field`` is an error (the field is declared through ``fields``).

math-verify (and sympy) load with this module, which the plugin registers lazily
(``LazyFactory``): ``rlvr plugins`` and ``rlvr validate`` never import it.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

from rlvr._builtin import last_boxed, parse_number, strip_tags
from rlvr.plugin import Sample, gold_from_row
from rlvr.plugins.rewards.params import AnswerParams

logger = logging.getLogger(__name__)


class AnswerReward:
    """Scores the correctness of the extracted answer (see the module docstring)."""

    def __init__(self, params: AnswerParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        gold = gold_from_row(sample.row, p.gold_field)
        found = p.extract(sample.completion)
        if found is None:
            return p.no_answer
        gold_num = parse_number(gold, percent=p.percent)
        pred_num = parse_number(found.text, percent=p.percent)
        if gold_num is not None and pred_num is not None:
            equal: bool | None = math.isclose(pred_num, gold_num, rel_tol=1e-9, abs_tol=1e-6)
        else:
            equal = self._math_verify(gold, found.text)
        if equal is None:
            return None
        if equal:
            stripped = p.stripped_match is not None and found.raw != found.text
            return p.stripped_match if stripped else p.correct
        if gold_num is not None and pred_num is not None and p.close:
            error = abs(pred_num - gold_num) / abs(gold_num) if gold_num else math.inf
            for tier in p.close:
                if error <= tier.rel_tol:
                    return tier.score
        return p.wrong

    def _math_verify(self, gold: str, pred: str) -> bool | None:
        """math-verify's verdict: None when the gold does not parse."""
        p = self.params
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "the answer reward's math-verify fallback must run in a main thread (its "
                "timeouts use signal.alarm); score samples in reward worker processes"
            )
        gold_parsed = _parse(_boxed(gold, p), p.timeout_seconds)
        if not gold_parsed:
            return None
        pred_parsed = _parse(_boxed(pred, p), p.timeout_seconds)
        if not pred_parsed:
            return False
        try:
            return bool(verify(gold_parsed, pred_parsed, timeout_seconds=p.timeout_seconds))
        except (Exception, TimeoutException):
            logger.warning("math-verify failed on gold %r", gold[:100], exc_info=True)
            return False


def _boxed(text: str, p: AnswerParams) -> str:
    """``text`` without tags, math delimiters or a trailing period, wrapped in ``\\boxed{}``."""
    text = strip_tags(text, p.answer_start, p.answer_end, p.reasoning_end or "").strip()
    if last_boxed(text) is not None:
        return text
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(left) and text.endswith(right) and len(text) > len(left + right):
            text = text[len(left) : -len(right)].strip()
            break
    return "\\boxed{" + text.rstrip(".").strip() + "}"


@functools.lru_cache(maxsize=4096)
def _parse(text: str, timeout: int) -> list[Any]:
    """math-verify's parse (cached: a GRPO group shares one gold); [] on any failure."""
    try:
        return parse(
            text,
            extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
            parsing_timeout=timeout,
        )
    except (Exception, TimeoutException):
        logger.warning("math-verify could not parse %r", text[:100], exc_info=True)
        return []
