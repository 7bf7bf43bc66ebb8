"""``format``: does the completion follow "reasoning block, then answer block"?

Full-match semantics (no ``re.MULTILINE`` ``$``): apart from whitespace around the whole
completion, nothing may come before the reasoning block or after the answer block, each tag
appears exactly once, and neither block may be blank. ``...</answer>\\njunk <answer>2</answer>``,
``<answer></answer>`` and duplicated blocks all fail.

The score is ``match_score`` on a full match, plus per-tag partial credit: ``tag_score`` for each
tag that appears exactly once, ``tag_penalty`` for each that does not (a tag of a present but
blank block counts as not appearing). With ``prefilled_reasoning`` the opening reasoning tag was
emitted by the chat template, so the completion may omit it and it earns no per-tag credit.

``pattern`` replaces the tag layout with a regular expression that the whole stripped
completion must match (``re.fullmatch`` with ``re.DOTALL``), for layouts that are not tag
blocks, e.g. GSM8K's final line ``#### 42``: ``'.*\\n#### *-?[0-9][0-9,]*(\\.[0-9]+)?'``.
"""

from __future__ import annotations

import re

from rlvr.plugin import Sample
from rlvr.plugins.rewards.params import FormatParams


class FormatReward:
    """Scores the layout of a completion (see the module docstring)."""

    def __init__(self, params: FormatParams) -> None:
        self.params = params
        self._pattern = re.compile(params.pattern, re.DOTALL) if params.pattern else None

    def __call__(self, sample: Sample) -> float:
        p = self.params
        text = sample.completion
        score = p.match_score if self.matches(text) else 0.0
        if p.tag_score or p.tag_penalty:
            good = self._good_tags(text)
            score += sum(p.tag_score if t in good else p.tag_penalty for t in p.scored_tags())
        return score

    def matches(self, text: str) -> bool:
        """True when ``text`` is [reasoning block] answer block, or matches ``pattern``."""
        p = self.params
        rest = text.strip()
        if self._pattern is not None:
            return self._pattern.fullmatch(rest) is not None
        if p.reasoning_start is not None and p.reasoning_end is not None:
            opening = text.count(p.reasoning_start)
            if p.prefilled_reasoning:
                if opening > 1 or (opening == 1 and not rest.startswith(p.reasoning_start)):
                    return False
            elif opening != 1 or not rest.startswith(p.reasoning_start):
                return False
            if text.count(p.reasoning_end) != 1:
                return False
            if rest.startswith(p.reasoning_start):
                rest = rest[len(p.reasoning_start) :]
            reasoning, _, rest = rest.partition(p.reasoning_end)
            if not reasoning.strip():
                return False
        if text.count(p.answer_start) != 1 or text.count(p.answer_end) != 1:
            return False
        between, found, rest = rest.partition(p.answer_start)
        if not found or (between.strip() and not p.allow_text_between):
            return False
        answer, found, tail = rest.partition(p.answer_end)
        return bool(found and answer.strip() and not tail.strip())

    def _good_tags(self, text: str) -> set[str]:
        """Tags that appear exactly once and do not delimit a blank block."""
        p = self.params
        good = {t for t in p.tags() if text.count(t) == 1}
        blocks = [(p.answer_start, p.answer_end)]
        if p.reasoning_start is not None and p.reasoning_end is not None:
            blocks.append((p.reasoning_start, p.reasoning_end))
        for start, end in blocks:
            i, j = text.find(start), text.find(end)
            if p.prefilled_reasoning and start == p.reasoning_start and i == -1:
                i, start = 0, ""  # the template opened the block at the very start
            if (
                start in good | {""}
                and end in good
                and i <= j
                and not text[i + len(start) : j].strip()
            ):
                good -= {start, end}
        return good
