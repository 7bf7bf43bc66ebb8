"""Answer extraction and number parsing for rewards: pure Python and ``re``, no sympy.

Shared by the built-in rewards (``answer``, ``numbers``, ``format``) and meant for third-party
reward authors too. Everything here is fast (microseconds per completion) and never raises on
odd model output: a helper that finds nothing returns ``None`` (or an empty list).

- :func:`find_blocks` / :func:`last_block`: the contents of ``<tag>...</tag>`` blocks.
- :func:`last_boxed`: the last ``\\boxed{...}`` with balanced braces.
- :func:`extract_answer`: a prediction string by an ordered list of strategies
  (:data:`STRATEGIES`); :class:`ExtractionParams` is the matching pydantic params mixin.
- :func:`gold_from_gsm8k`: the part of a GSM8K solution after ``####``; :func:`gold_from_row`;
  :func:`row_field` (a row field, or an error naming the fields the row has).
- :func:`strip_tags`: remove ``<answer>``-style tags before handing text to a math parser.
- :func:`parse_number`: one number written in any of the usual ways (``$1,080``, ``-3``,
  ``\u22123``, ``72.``, ``18 dollars``, ``50%``, ``\\frac{1}{2}``, ``1/2``, ``1\\,080``), or
  ``None``.
- :func:`find_numbers`, :func:`first_number`, :func:`last_number`: numbers in free text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

from pydantic import Field, field_validator, model_validator

from rlvr.api.registration import Params

Percent = Literal["number", "fraction"]
"""How ``50%`` reads: ``"number"`` -> 50.0 (GSM8K's convention), ``"fraction"`` -> 0.5."""

Strategy = Literal["answer_tag", "boxed", "hash", "answer_is", "last_number", "text"]

#: The default strategies of :func:`extract_answer`, in order. ``"text"`` (the whole answer
#: region) is not among them: it always finds something, so it only goes last, on request.
STRATEGIES: tuple[Strategy, ...] = ("answer_tag", "boxed", "hash", "answer_is", "last_number")
_KNOWN = ", ".join(get_args(Strategy))

# --------------------------------------------------------------------------- blocks


def find_blocks(text: str, start: str, end: str) -> list[str]:
    """Contents of every ``start ... end`` block, left to right (blocks do not nest).

    A block opens at ``start`` and closes at the first ``end`` after it; an opening tag with no
    closing tag after it is not a block. Contents are returned unstripped.
    """
    blocks: list[str] = []
    pos = 0
    while (i := text.find(start, pos)) != -1:
        j = text.find(end, i + len(start))
        if j == -1:
            break
        blocks.append(text[i + len(start) : j])
        pos = j + len(end)
    return blocks


def last_block(text: str, start: str, end: str) -> str | None:
    """Contents of the last complete ``start ... end`` block, or ``None``."""
    blocks = find_blocks(text, start, end)
    return blocks[-1] if blocks else None


def after_last(text: str, tag: str) -> str | None:
    """The text after the last occurrence of ``tag``, or ``None`` when it does not occur."""
    i = text.rfind(tag)
    return None if i == -1 else text[i + len(tag) :]


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE = re.compile(r"\\boxed\s+([^\s$]+)")


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced.

    ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``; an unbalanced (truncated) last box is
    skipped in favour of the one before it. ``\\boxed 5`` (no braces) is accepted too.
    """
    candidates: list[tuple[int, str]] = []
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            candidates.append((m.start(), text[m.end() : i - 1]))
    candidates.extend((m.start(), m.group(1)) for m in _BOXED_BARE.finditer(text))
    return max(candidates)[1] if candidates else None


# --------------------------------------------------------------------------- gold


def gold_from_gsm8k(answer_field: str) -> str:
    """The final answer of a GSM8K solution: the text after the last ``####``, stripped.

    A string without ``####`` is returned stripped, so this is safe on any gold field.
    """
    return answer_field.rsplit("####", 1)[-1].strip()


def row_field(row: Mapping[str, Any], field: str) -> str:
    """``row[field]`` as a string; a ``KeyError`` naming the fields the row has when missing."""
    if field not in row:
        raise KeyError(f"dataset row has no field {field!r} (it has: {', '.join(map(str, row))})")
    return str(row[field])


def gold_from_row(row: Mapping[str, Any], field: str = "answer") -> str:
    """The gold answer of a dataset row: ``row[field]`` as a string, GSM8K's ``#### N`` detected.

    Raises ``KeyError`` naming the field and the fields the row has when it is missing.
    """
    return gold_from_gsm8k(row_field(row, field))


_TAG = re.compile(r"</?[A-Za-z][\w\-]*>")


def strip_tags(text: str, *tags: str) -> str:
    """``text`` without XML-like tags (``<answer>``, ``</SOLUTION>``) and the given literal tags."""
    for tag in tags:
        if tag:
            text = text.replace(tag, " ")
    return _TAG.sub(" ", text)


# --------------------------------------------------------------------------- numbers

_UINT = r"(?:\d{1,3}(?:,\d{3}(?!\d))+|\d+)(?:\.\d+)?|\.\d+"
_FRAC = rf"\\[dt]?frac\s*\{{\s*(?P<fn>[-+]?(?:{_UINT}))\s*\}}\s*\{{\s*(?P<fd>{_UINT})\s*\}}"
_FRAC_SHORT = r"\\[dt]?frac\s*(?P<sn>\d)\s*(?P<sd>\d)"
_SLASH = rf"(?P<n>{_UINT})\s*/\s*(?P<d>{_UINT})"
_BODY = rf"(?:{_FRAC}|{_FRAC_SHORT}|{_SLASH}|(?P<x>{_UINT}))"

_WHOLE = re.compile(
    rf"(?P<sign>[-+]?)\s*{_BODY}\s*(?P<pct>%)?\s*"
    r"(?P<unit>[A-Za-z][A-Za-z'.\-/]+(?:\s+[A-Za-z][A-Za-z'.\-/]*)*)?"
)
_TOKEN = re.compile(rf"(?<![\w.])(?:(?<![\w)\]}}])(?P<sign>[-+]))?\$?{_BODY}(?P<pct>\s?%)?(?![\d])")

_TEXT_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}"
)
_LATEX_NOSPACE = re.compile(r"\\[,!]|[\u2009\u202f]")
_LATEX_SPACE = re.compile(r"\\[;: ]|\\q?quad|~|\u00a0")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\u00b0")
_PERCENT_WORD = re.compile(r"(?i)per\s?cent\b")


def _normalise(text: str) -> str:
    """Rewrite the spellings of one number that regexes should not have to know about."""
    s = text.replace("\u2212", "-").replace("{,}", ",")
    s = _TEXT_WRAPPERS.sub(r" \1 ", s)
    s = _LATEX_NOSPACE.sub("", s)
    s = _LATEX_SPACE.sub(" ", s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\%", "%").replace("\\$", "$").replace("\\left", "").replace("\\right", "")
    return s


_MATH_DELIMITERS = re.compile(r"\\[()\[\]]")


def _unbox(s: str) -> str:
    """The inside of ``s`` when one ``\\boxed{...}`` spans all of it, else ``s``."""
    m = _BOXED.match(s)
    if m is None or not s.endswith("}"):
        return s
    depth = 1
    for i in range(m.end(), len(s)):
        depth += {"{": 1, "}": -1}.get(s[i], 0)
        if depth == 0:
            return s[m.end() : i] if i == len(s) - 1 else s
    return s


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _value(m: re.Match[str], percent: Percent) -> float | None:
    if m["x"] is not None:
        value = _num(m["x"])
    else:
        num, den = (
            (m["fn"], m["fd"])
            if m["fn"] is not None
            else (m["sn"], m["sd"])
            if m["sn"] is not None
            else (m["n"], m["d"])
        )
        if _num(den) == 0:
            return None
        value = _num(num) / _num(den)
    if m["sign"] == "-":
        value = -value
    if m["pct"] and percent == "fraction":
        value /= 100
    return value


def parse_number(text: str, *, percent: Percent = "number") -> float | None:
    """The one number ``text`` spells, or ``None`` when it is not exactly one number.

    Accepted: thousands commas (``1,080``, ``1,000.00``, LaTeX ``1{,}080``), signs (``-3``,
    ``\u22123``, ``+3``), ``$``/``\\$`` anywhere, math delimiters, a trailing ``%`` or
    "percent" (50 by default, 0.5 with ``percent="fraction"``), trailing punctuation (``72.``),
    trailing unit words (``18 dollars``, ``18\\text{ dollars}``, ``90^\\circ``), fractions
    (``\\frac{1}{2}``, ``\\dfrac12``, ``-\\frac{3}{4}``, ``1/2``), LaTeX spacing (``1\\,080``,
    ``\\!``), one wrapping ``\\boxed{}`` and markdown bold.

    Rejected (``None``): anything else around the number ("about 18", "18 + 2"), several
    numbers ("7, 8", "18 dollars and 50 cents"), invalid grouping ("1,0800"), a zero
    denominator, and a single trailing letter (``2x``, ``2 x``: algebra, not a unit).
    """
    s = _unbox(text.strip())
    s = _normalise(s).replace("$", "").replace("*", "")
    s = _MATH_DELIMITERS.sub("", s)
    s = _PERCENT_WORD.sub("%", s)
    s = s.strip().rstrip(".,;:!?").strip()
    while s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    m = _WHOLE.fullmatch(s)
    if m is None:
        return None
    return _value(m, percent)


class Number(NamedTuple):
    """A number found in free text: its value and the (normalised) text that spelled it."""

    value: float
    text: str


def find_numbers(text: str, *, percent: Percent = "number") -> list[Number]:
    """Every number in free text, left to right, with the spellings of :func:`parse_number`.

    A minus sign counts only when it is not a binary minus (``5-3`` holds 5 and 3; ``x = -3``
    holds -3). ``a/b`` and ``\\frac{a}{b}`` count as one number (their quotient). A period that
    ends a sentence ("is 72.") is not part of the number.
    """
    s = _normalise(text)
    found = []
    for m in _TOKEN.finditer(s):
        value = _value(m, percent)
        if value is not None:
            found.append(Number(value, m.group(0)))
    return found


def first_number(text: str, *, percent: Percent = "number") -> float | None:
    """The first number in ``text`` (see :func:`find_numbers`), or ``None``."""
    numbers = find_numbers(text, percent=percent)
    return numbers[0].value if numbers else None


def last_number(text: str, *, percent: Percent = "number") -> float | None:
    """The last number in ``text`` (see :func:`find_numbers`), or ``None``."""
    numbers = find_numbers(text, percent=percent)
    return numbers[-1].value if numbers else None


# --------------------------------------------------------------------------- strategies

_HASH = re.compile(r"####[ \t]*([^\n]*)")
_ANSWER_IS = re.compile(
    r"(?i:\b(?:final\s+)?answer\s+is\b[ \t*_:]*)"  # "The (final) answer is X"
    r"|(?im:^[ \t*#_>]*(?:final\s+)?answer[ \t*_]*:[ \t*_]*)"  # "Answer: X", "**Answer:** X"
    r"|(?m:^[ \t]*A[ \t]*:[ \t]*)"  # "A: X" (GSM8K few-shot style), at a line start
)
_SENTENCE_END = re.compile(r"\.(?=\s|$)")


def _after_marker(text: str, end: int) -> str:
    """The rest of the line after a marker (or the next line when the marker ends its line),
    cut at the first sentence end ("is 72. Done" -> "72")."""
    rest = text[end:].lstrip()
    line = rest.split("\n", 1)[0]
    m = _SENTENCE_END.search(line)
    return (line[: m.start()] if m else line).strip().rstrip(",;:!*").strip()


@dataclass(frozen=True)
class Extraction:
    """A prediction found in a completion.

    ``raw`` is the text exactly as found (e.g. the whole inside of the answer block, whitespace
    included); ``text`` is ``raw`` stripped; ``strategy`` is the strategy that found it.
    """

    text: str
    raw: str
    strategy: Strategy


def answer_region(completion: str, reasoning_end: str | None) -> str:
    """Where answers are searched: the text after the last ``reasoning_end`` when the completion
    contains it, else the whole completion (so a box inside the reasoning does not count once
    the reasoning block is closed)."""
    if reasoning_end:
        after = after_last(completion, reasoning_end)
        if after is not None:
            return after
    return completion


def _find(strategy: Strategy, text: str, answer_start: str, answer_end: str) -> str | None:
    if strategy == "answer_tag":
        return last_block(text, answer_start, answer_end)
    if strategy == "boxed":
        return last_boxed(text)
    if strategy == "hash":
        matches = _HASH.findall(text)
        return matches[-1] if matches else None
    if strategy == "answer_is":
        marks = list(_ANSWER_IS.finditer(text))
        return _after_marker(text, marks[-1].end()) if marks else None
    if strategy == "last_number":
        numbers = find_numbers(text)
        return numbers[-1].text if numbers else None
    if strategy == "text":
        return text
    raise ValueError(f"unknown extraction strategy {strategy!r}; known: {_KNOWN}")


def extract_answer(
    completion: str,
    strategies: Sequence[Strategy] = STRATEGIES,
    *,
    answer_start: str = "<answer>",
    answer_end: str = "</answer>",
    reasoning_end: str | None = "</think>",
    after_reasoning: bool = True,
) -> Extraction | None:
    """The prediction in ``completion``: the first strategy (in the given order) that finds a
    non-blank answer wins; ``None`` when none does.

    Strategies (each takes the LAST occurrence in the searched text):

    - ``"answer_tag"``: the inside of the last complete ``answer_start ... answer_end`` block.
    - ``"boxed"``: the inside of the last ``\\boxed{...}`` (balanced braces).
    - ``"hash"``: the rest of the line after the last ``####``.
    - ``"answer_is"``: after "the answer is", "the final answer is", "Answer:", "**Answer:**"
      or a line-initial "A:", to the end of that line or sentence.
    - ``"last_number"``: the last number (see :func:`find_numbers`).
    - ``"text"``: the whole searched text (e.g. for the ``numbers`` reward's ``position:
      any``: the gold anywhere in the answer). Not a default.

    With ``after_reasoning`` (the default) and ``reasoning_end`` present in the completion, only
    the text after the last ``reasoning_end`` is searched (see :func:`answer_region`).
    """
    text = answer_region(completion, reasoning_end if after_reasoning else None)
    for strategy in strategies:
        raw = _find(strategy, text, answer_start, answer_end)
        if raw is not None and raw.strip():
            return Extraction(raw.strip(), raw, strategy)
    return None


class ExtractionParams(Params):
    """Params mixin for rewards that extract a prediction; subclass it to add your own fields.

    Field names match the ``format`` reward's, so one set of tags reads the same everywhere.
    """

    strategies: tuple[Strategy, ...] = Field(
        STRATEGIES, description="extraction strategies, tried in order; the first that finds wins"
    )
    answer_start: str = Field("<answer>", description="opening answer tag (answer_tag)")
    answer_end: str = Field("</answer>", description="closing answer tag (answer_tag)")
    reasoning_end: str | None = Field("</think>", description="closing reasoning tag, or null")
    after_reasoning: bool = Field(
        True, description="search only after the last reasoning_end when the completion has it"
    )

    @field_validator("strategies")
    @classmethod
    def _strategies_ok(cls, value: tuple[Strategy, ...]) -> tuple[Strategy, ...]:
        if not value:
            raise ValueError(f"give at least one strategy out of: {_KNOWN}")
        if len(set(value)) != len(value):
            raise ValueError("each strategy may appear only once")
        return value

    @model_validator(mode="after")
    def _tags_ok(self) -> ExtractionParams:
        if not self.answer_start or not self.answer_end or self.reasoning_end == "":
            raise ValueError("tags must be non-empty strings (reasoning_end may be null)")
        return self

    def extract(self, completion: str) -> Extraction | None:
        """:func:`extract_answer` with these params."""
        return extract_answer(
            completion,
            self.strategies,
            answer_start=self.answer_start,
            answer_end=self.answer_end,
            reasoning_end=self.reasoning_end,
            after_reasoning=self.after_reasoning,
        )


__all__ = [
    "STRATEGIES",
    "Extraction",
    "ExtractionParams",
    "Number",
    "Percent",
    "Strategy",
    "after_last",
    "answer_region",
    "extract_answer",
    "find_blocks",
    "find_numbers",
    "first_number",
    "gold_from_gsm8k",
    "gold_from_row",
    "row_field",
    "last_block",
    "last_boxed",
    "last_number",
    "parse_number",
    "strip_tags",
]
