"""Rows from a reasoning-gym task (``data.reasoning_gym``): a seeded generator stream split
into training and held-out problems by a hash of each question.

Why a hash split: the easy settings of a procedural task have small spaces (1,000 draws of
``chain_sum`` with two one-digit terms hold 198 distinct questions), so two generator seeds
overlap heavily and a model trained on one is evaluated on problems it saw. Here a question is
held out iff :func:`in_eval_share` of its normalised text is true; the training rows are the
draws for which it is false. The splits are disjoint by construction, for any seed and size,
and a question keeps its side when the generator knobs or the seed change.

- Draw ``j`` of the stream is item ``j % CHUNK`` of the task's dataset created with seed
  ``seed + (j // CHUNK) * CHUNK`` and size ``CHUNK``: for the tasks that seed each item with
  ``seed + index`` (nearly all) that is the task's own item ``j``, and no dataset is ever
  created with a huge size (some tasks precompute per item in ``__init__``).
- ``train``: the first ``train_size`` draws outside the eval share, repeats kept (that is the
  task's distribution); ``test``: the first ``eval_size`` *distinct* questions inside it.
- Each row holds what the ``reasoning_gym`` reward needs: ``answer``, ``metadata`` and
  ``task_params`` (JSON strings: a task's metadata varies in shape from row to row, which a
  columnar file cannot hold as a struct), ``task``, and the ``question`` and ``prompt``.

reasoning-gym is the optional extra ``rlvr[reasoning-gym]``, imported only when rows are made.
"""

from __future__ import annotations

import difflib
import enum
import functools
import hashlib
import json
import logging
import math
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.config.schema import ReasoningGymConfig

logger = logging.getLogger("rlvr.data.reasoning_gym")

#: Items per generator dataset object (see the module doc).
CHUNK = 1000
#: The splits a reasoning-gym source has.
SPLITS = ("train", "test")
#: Draws tried per wanted row before giving up (a task space too small for the sizes asked).
_DRAWS_PER_ROW = 20
_MIN_DRAWS = 10_000


class ReasoningGymError(RlvrError, ValueError):
    """The reasoning-gym task cannot be generated as configured."""


def normalise(question: str) -> str:
    """The question as the split sees it: lower case, whitespace runs made one space."""
    return " ".join(question.lower().split())


def in_eval_share(question: str, share: float) -> bool:
    """Whether ``question`` is held out: the first 8 bytes of the SHA-256 of its normalised
    text, read as a fraction of 2**64, fall below ``share``."""
    digest = hashlib.sha256(normalise(question).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


# --------------------------------------------------------------------------- the generator


def _package() -> Any:
    try:
        import reasoning_gym  # optional extra rlvr[reasoning-gym]; 1.5 s to import
    except ImportError:
        raise ReasoningGymError(
            "data.reasoning_gym needs the reasoning-gym package: pip install 'rlvr[reasoning-gym]'"
        ) from None
    return reasoning_gym


def knobs(task: str) -> list[str]:
    """The generator knobs of ``task`` (its config dataclass fields but seed and size)."""
    return [f.name for f in fields(_config_class(task)) if f.name not in ("seed", "size")]


def _config_class(task: str) -> Any:
    registry = _package().factory.DATASETS
    if task not in registry:
        close = difflib.get_close_matches(task, registry, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ReasoningGymError(
            f"reasoning-gym has no task {task!r}{hint} ({len(registry)} tasks: "
            f"python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))')"
        )
    return registry[task][1]


def make_dataset(task: str, params: Mapping[str, Any], *, seed: int = 0, size: int = 1) -> Any:
    """The task's dataset object (``reasoning_gym.create_dataset``), its errors as one line."""
    package = _package()
    allowed = knobs(task)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ReasoningGymError(
            f"reasoning-gym task {task!r} has no knob(s) {', '.join(map(repr, unknown))}; its "
            f"knobs: {', '.join(allowed)}"
        )
    try:
        return package.create_dataset(task, seed=seed, size=size, **_coerce(task, params))
    except (AssertionError, ValueError, TypeError) as exc:
        reason = str(exc) or type(exc).__name__
        raise ReasoningGymError(
            f"reasoning-gym task {task!r} rejects the knobs {dict(params)}: {reason}"
        ) from None


def _coerce(task: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the strings a YAML file gives turned into the enum members that a knob
    typed ``SomeEnum`` or ``list[SomeEnum]`` holds (``aiw``'s ``task_types: [siblings]``)."""
    hints = typing.get_type_hints(_config_class(task))
    out = dict(params)
    for name, value in params.items():
        hint = hints.get(name)
        args = typing.get_args(hint)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            out[name] = _member(hint, value)
        elif (
            typing.get_origin(hint) in (list, tuple)
            and args
            and isinstance(args[0], type)
            and issubclass(args[0], enum.Enum)
            and isinstance(value, list | tuple)
        ):
            out[name] = [_member(args[0], v) for v in value]
    return out


def _member(kind: type[enum.Enum], value: Any) -> Any:
    """The member of ``kind`` with that value or name; ``value`` itself when none has."""
    for member in kind:
        if value in (member.value, member.name):
            return member
    return value


@functools.lru_cache(maxsize=64)
def _scoring_dataset(task: str, params_json: str) -> Any:
    return make_dataset(task, json.loads(params_json))


def reasoning_gym_dataset(task: str, params: Mapping[str, Any] | None = None) -> Any:
    """The dataset object of ``task`` with these generator knobs, built once per process and
    (task, knobs): what a reward calls ``score_answer`` on (``params`` as a row's
    ``task_params`` holds them; YAML strings become the enum members a knob needs)."""
    return _scoring_dataset(task, json.dumps(_jsonable(dict(params or {})), sort_keys=True))


def draws(task: str, params: Mapping[str, Any], seed: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(j, entry)`` for every draw ``j`` of the stream (endless; see the module doc)."""
    start = 0
    while True:
        dataset = make_dataset(task, params, seed=seed + start, size=CHUNK)
        for i in range(CHUNK):
            try:
                entry = dataset[i]
            except Exception as exc:  # a generator bug or knobs it cannot work with
                raise ReasoningGymError(
                    f"reasoning-gym task {task!r} failed to generate draw {start + i} with the "
                    f"knobs {dict(params)}: {type(exc).__name__}: {exc}"
                ) from exc
            yield start + i, entry
        start += CHUNK


def _jsonable(value: Any) -> Any:
    """``value`` as JSON holds it (tuples become lists, anything else its ``str``)."""
    return json.loads(json.dumps(value, default=str))


def make_row(
    entry: Mapping[str, Any], draw: int, *, task: str, params_json: str, template: str
) -> dict[str, Any]:
    """A dataset row of one generated entry (see the module doc for the fields)."""
    question = str(entry["question"])
    answer = entry.get("answer")
    return {
        "prompt": template.format(question=question),
        "question": question,
        "answer": None if answer is None else str(answer),
        "metadata": json.dumps(_jsonable(entry.get("metadata") or {}), sort_keys=True),
        "task": task,
        "task_params": params_json,
        "draw": draw,
    }


# --------------------------------------------------------------------------- splits


@dataclass(frozen=True)
class SpaceEstimate:
    """How many distinct questions ``draws`` draws held, and the task space size that
    explains it under uniform sampling (None: no repeat seen, so the space is far larger)."""

    draws: int
    distinct: int
    size: float | None

    def describe(self) -> str:
        if self.size is None:
            return f"{self.distinct} distinct in {self.draws} draws (no repeats: space >> draws)"
        return f"{self.distinct} distinct in {self.draws} draws (space ~{self.size:,.0f} questions)"


def estimate_space(distinct: int, n: int) -> SpaceEstimate:
    """The ``S`` with ``S * (1 - (1 - 1/S) ** n) == distinct`` (expected distinct values in
    ``n`` uniform draws from ``S``); a lower bound for a skewed generator."""
    if n < 1 or distinct >= n:
        return SpaceEstimate(n, distinct, None)

    def expected(s: float) -> float:
        return s * -math.expm1(n * math.log1p(-1 / s)) if s > 1 else 1.0

    lo, hi = float(distinct), float(distinct)
    while expected(hi) < distinct - 1e-9:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid) < distinct else (lo, mid)
    return SpaceEstimate(n, distinct, hi)


def task_space(
    task: str, params: Mapping[str, Any], *, seed: int = 0, n: int = 10_000
) -> SpaceEstimate:
    """Distinct questions in the first ``n`` draws of the stream, and the size estimate."""
    seen = set()
    for j, entry in draws(task, params, seed):
        if j >= n:
            break
        seen.add(normalise(str(entry["question"])))
    return estimate_space(len(seen), n)


@dataclass
class Split:
    """One split's rows and what generating them showed."""

    rows: list[dict[str, Any]]
    draws: int  # of the stream, both sides counted
    space: SpaceEstimate  # of this side of the split


def make_split(cfg: Any, split: str) -> Split:
    """The rows of ``split`` (``train`` or ``test``) for ``cfg`` (a
    :class:`rlvr.config.schema.ReasoningGymConfig`)."""
    if split not in SPLITS:
        raise ReasoningGymError(
            f"data.reasoning_gym has the splits {' and '.join(SPLITS)}, not {split!r}"
        )
    held_out = split == "test"
    want = cfg.eval_size if held_out else cfg.train_size
    share = cfg.eval_share if held_out else 1 - cfg.eval_share
    limit = max(_MIN_DRAWS, math.ceil(want / share) * _DRAWS_PER_ROW)
    params_json = json.dumps(_jsonable(cfg.params), sort_keys=True)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    taken = 0  # draws on this side
    n = 0
    for n, entry in draws(cfg.task, cfg.params, cfg.seed):
        if n >= limit:
            break
        question = str(entry["question"])
        if in_eval_share(question, cfg.eval_share) != held_out:
            continue
        taken += 1
        key = normalise(question)
        if held_out and key in seen:
            continue
        seen.add(key)
        rows.append(
            make_row(entry, n, task=cfg.task, params_json=params_json, template=cfg.template)
        )
        if len(rows) == want:
            break
    space = estimate_space(len(seen), taken)
    if len(rows) < want:
        what = "distinct questions in the eval share" if held_out else "training draws"
        raise ReasoningGymError(
            f"reasoning-gym task {cfg.task!r}: only {len(rows)} {what} in {limit} draws "
            f"(wanted {want}; this side of the split: {space.describe()}); lower "
            f"data.reasoning_gym.{'eval_size' if held_out else 'train_size'}, change "
            "eval_share, or widen the knobs"
        )
    return Split(rows, n + 1, space)


def overlap(train: Sequence[Mapping[str, Any]], test: Sequence[Mapping[str, Any]]) -> int:
    """Distinct normalised questions found in both ``train`` and ``test``."""
    ours = {normalise(str(r["question"])) for r in train}
    return len(ours & {normalise(str(r["question"])) for r in test})


@functools.lru_cache(maxsize=8)
def _cached(cfg_json: str, split: str) -> tuple[Split, str]:
    cfg = ReasoningGymConfig.model_validate_json(cfg_json)
    return make_split(cfg, split), cfg.task


def reasoning_gym_rows(cfg: Any, split: str) -> list[dict[str, Any]]:
    """The rows of ``split``, generated once per process and config (the trainer's preflight
    and setup, and its evaluation, ask for the same rows)."""
    result, task = _cached(cfg.model_dump_json(), split)
    logger.info(
        "reasoning-gym %s [%s]: %d rows from %d draws; %s",
        task,
        split,
        len(result.rows),
        result.draws,
        result.space.describe(),
    )
    return [dict(row) for row in result.rows]


__all__ = [
    "CHUNK",
    "SPLITS",
    "ReasoningGymError",
    "SpaceEstimate",
    "Split",
    "draws",
    "estimate_space",
    "in_eval_share",
    "knobs",
    "make_dataset",
    "make_row",
    "make_split",
    "normalise",
    "overlap",
    "reasoning_gym_dataset",
    "reasoning_gym_rows",
    "task_space",
]
