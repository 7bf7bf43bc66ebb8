"""Which reward decides whether a completion is correct (accuracy, pass@k), from what score,
and which rewards decide format compliance; the rules are in :mod:`rlvr.evaluation.evaluate`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from rlvr.api.host import create_host
from rlvr.evaluation.errors import EvalError
from rlvr.rewards.functions import FUNCTION_REWARD


class Correctness(NamedTuple):
    """Which reward decides correctness, from what score, and why it was chosen."""

    label: str | None  #: None: no reward qualifies; accuracy and pass@k are not reported
    threshold: float | None
    rule: str  #: how it was chosen, for the console and the summary


#: A ``callable`` reward named like one that checks answers...
_ACCURACY_NAME = re.compile(r"accura|correct", re.IGNORECASE)
#: ...and not like one that checks the form.
_FORM_NAME = re.compile(r"format|length|len_|style|tag", re.IGNORECASE)
NO_CORRECTNESS = (
    "no reward checks answers: mark one with `correctness: true` or pass --metric LABEL"
)


def correctness(
    config: Any,
    metric: str | None = None,
    threshold: float | None = None,
    host: Any = None,
) -> Correctness:
    """The reward deciding whether a completion is correct, by the rule of the module doc.
    ``host`` says which plugins check answers (default: the installed plugins)."""
    entries = list(config.rewards)
    if not entries:
        env = getattr(config, "environment", None)
        why = ""
        if env is not None and env.name != "single_turn":
            why = (
                f"; the rewards of environment {env.name!r} are not used by evaluation, which "
                "samples single completions: add a reward that scores the answer, with "
                "`weight: 0.0` to leave training as it is (for reasoning_gym: "
                "{name: reasoning_gym, label: rg_eval, weight: 0.0})"
            )
        raise EvalError(f"evaluation needs at least one reward in the config's `rewards:`{why}")
    if metric is not None:
        found = [e for e in entries if e.key == metric]
        if not found:
            labels = ", ".join(e.key for e in entries)
            raise EvalError(f"metric {metric!r} is not a configured reward label ({labels})")
        entry, rule = found[0], "chosen with --metric"
    else:
        entry, rule = _correctness_entry(entries, host)
        if entry is None:
            return Correctness(None, None, NO_CORRECTNESS)
    value = float(_declared_correct(entry) if threshold is None else threshold)
    return Correctness(entry.key, value, rule)


def _correctness_entry(entries: Sequence[Any], host: Any) -> tuple[Any, str]:
    marked = [e for e in entries if getattr(e, "correctness", False)]
    if marked:
        return marked[0], "marked `correctness: true`"
    if host is None:
        host = create_host()
    for e in entries:
        record = host.rewards.get(e.name)
        if record is not None and getattr(record, "correctness", False):
            return e, f"the {e.name} reward checks answers"
    for e in entries:
        if e.name not in ("callable", FUNCTION_REWARD):
            continue
        names = [e.key, str(getattr(e.params, "function", "")).rpartition(":")[2]]
        if any(_ACCURACY_NAME.search(n) for n in names) and not any(
            _FORM_NAME.search(n) for n in names
        ):
            return e, "a callable reward named for accuracy"
    return None, NO_CORRECTNESS


def _declared_correct(entry: Any) -> float:
    """The score at which a reward counts as satisfied: its params' ``correct`` when it
    declares one (``answer``, ``numbers``: a correct answer; ``format``: a full match), else 1.0."""
    correct = getattr(entry.params, "correct", None)
    is_number = isinstance(correct, int | float) and not isinstance(correct, bool)
    return float(correct) if is_number and correct is not None else 1.0


def format_checks(config: Any) -> list[tuple[str, float]]:
    """``(label, threshold)`` of every reward whose plugin is ``format``: a completion is
    *format-compliant* when each of them scores at least its declared ``correct`` (for the
    built-in ``format`` reward: the score of a full match, tag credit included). Empty when no
    ``format`` reward is configured (compliance is then not reported)."""
    return [(e.key, _declared_correct(e)) for e in config.rewards if e.name == "format"]


def is_format_ok(rewards: Mapping[str, float | None], checks: Sequence[tuple[str, float]]) -> bool:
    """Whether a completion's raw reward values pass every format check (None fails)."""
    return all((v := rewards.get(label)) is not None and v >= thr for label, thr in checks)


__all__ = ["NO_CORRECTNESS", "Correctness", "correctness", "format_checks", "is_format_ok"]
