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

from pydantic import Field, model_validator

from rlvr import Params, Sample


class FormatParams(Params):
    """Tags and scores of the ``format`` reward."""

    reasoning_start: str | None = Field(
        "<think>", description="opening reasoning tag (null with reasoning_end: no reasoning block)"
    )
    reasoning_end: str | None = Field("</think>", description="closing reasoning tag")
    answer_start: str = Field("<answer>", description="opening answer tag")
    answer_end: str = Field("</answer>", description="closing answer tag")
    prefilled_reasoning: bool = Field(
        False, description="the chat template already emitted reasoning_start: it is optional"
    )
    allow_text_between: bool = Field(
        False, description="allow text between the reasoning and answer blocks (else whitespace)"
    )
    pattern: str | None = Field(
        None,
        description="regex the whole stripped completion must match instead of the tag layout "
        "(re.fullmatch, DOTALL); no per-tag credit",
    )
    match_score: float = Field(1.0, description="score of a full match")
    tag_score: float = Field(0.0, description="added per tag that appears exactly once")
    tag_penalty: float = Field(0.0, description="added per tag that does not")

    @model_validator(mode="after")
    def _check_tags(self) -> FormatParams:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as e:
                raise ValueError(f"pattern {self.pattern!r} is not a valid regex: {e}") from None
            if self.tag_score or self.tag_penalty:
                raise ValueError("tag_score and tag_penalty need the tag layout; unset pattern")
        if (self.reasoning_start is None) != (self.reasoning_end is None):
            raise ValueError("set both reasoning_start and reasoning_end, or neither")
        if self.prefilled_reasoning and self.reasoning_start is None:
            raise ValueError("prefilled_reasoning needs reasoning_start and reasoning_end")
        tags = self.tags()
        if any(not tag.strip() for tag in tags):
            raise ValueError("tags must be non-blank strings")
        for a in tags:
            for b in tags:
                if a is not b and a in b:
                    raise ValueError(f"tag {a!r} occurs inside tag {b!r}; tags must be distinct")
        return self

    @property
    def correct(self) -> float:
        """The score of a full match (every scored tag then appears once): the score at which
        a completion counts as format-compliant (``rlvr eval`` and in-training eval report the
        fraction that reach it), as ``correct`` is a correct answer's score for ``answer``."""
        return self.match_score + self.tag_score * len(self.scored_tags())

    def scored_tags(self) -> list[str]:
        """The tags that earn per-tag credit (a prefilled opening reasoning tag does not)."""
        return [
            t for t in self.tags() if not (self.prefilled_reasoning and t == self.reasoning_start)
        ]

    def tags(self) -> list[str]:
        """The tags in their expected order."""
        reasoning = [self.reasoning_start, self.reasoning_end] if self.reasoning_end else []
        return [*reasoning, self.answer_start, self.answer_end]  # type: ignore[list-item]


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
