"""Calling a reward once, the same in a worker process and in the parent: build it, call it on
a sample (or a batch), and turn what it did (a value, a raise, a wrong return) into a reply the
parent records (:class:`rlvr.rewards.pool_job.Job`). Nothing here raises for a reward's fault.
"""

from __future__ import annotations

import math
import numbers
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlvr.api.runtime import (  # pydantic-free: the pytest plugin imports this
    REWARD_LIMIT,
    BatchOutput,
)

if TYPE_CHECKING:
    from rlvr.api.registration import Sample


MAX_TRACEBACK = 4000  # characters of a traceback sent to the parent


def build_reward(label: str, factory: Callable, params: Any) -> Callable | str:
    """The reward, or the message every call of it reports when building it failed."""
    try:
        return factory(params)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a factory is a failure too
        return f"building reward {label!r} failed: {type(exc).__name__}: {exc}"


def _raised(
    exc: BaseException, label: str, seen: set[tuple[str, str]]
) -> tuple[str, str, str | None]:
    """``(error message, site, traceback)`` of an exception a reward raised.

    ``site`` names where it was raised (type, file, line): the same bug with different
    messages is one site. The traceback comes only the first time this process sees that
    site for that label (``seen``), to keep the pipes lean."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    site = f"{type(exc).__name__} at {where}"
    tb = None
    if (label, site) not in seen:
        seen.add((label, site))
        # without the frame of the function that made the call
        below = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        lines = traceback.format_exception(type(exc), exc, below)
        tb = clip("".join(lines), MAX_TRACEBACK)
    return clip(f"{type(exc).__name__}: {exc}", 300), site, tb


def _checked(label: str, value: Any) -> tuple[float | None, str | None]:
    """``(value as a float or None, None)``, or ``(None, why the value is not a score)``."""
    if value is None:
        return None, None
    if isinstance(value, numbers.Real) and math.isfinite(value):
        if abs(float(value)) <= REWARD_LIMIT:
            return float(value), None
        # Finite, but no score: its square overflows the advantages' statistics (1e308).
        return None, (
            f"reward {label!r} returned {clip(repr(value), 80)}, beyond the "
            f"{REWARD_LIMIT:g} a reward value may reach in magnitude; expected a score of "
            "about -1..1"
        )
    return None, (
        f"reward {label!r} returned {clip(repr(value), 80)} ({type(value).__name__}); "
        "expected a finite float, a bool or None"
    )


def call_reward(
    fn: Callable | str, label: str, sample: Sample, seen: set[tuple[str, str]]
) -> tuple[float | None, str | None, str | None, str | None]:
    """``(value, None, None, None)``, or ``(None, error message, site, traceback)`` (see
    :func:`_raised`)."""
    if isinstance(fn, str):
        return None, fn, None, None
    try:
        value = fn(sample)
    except BaseException as exc:  # noqa: BLE001 - report, keep the worker alive
        return None, *_raised(exc, label, seen)
    return (*_checked(label, value), None, None)


#: What a batch call yields: ``(per-sample (value, error) or None, error of the whole call,
#: site, traceback, what it logged or None)``.
BatchReply = tuple[
    list[tuple[float | None, str | None]] | None,
    str | None,
    str | None,
    str | None,
    dict[str, Any] | None,
]


def call_batch(
    fn: Callable | str, label: str, samples: list[Sample], seen: set[tuple[str, str]]
) -> BatchReply:
    """One call of a batched reward: each sample's ``(value, error)``, or the error that
    fails the whole batch (a raise, a return that is not one value per sample)."""
    if isinstance(fn, str):
        return None, fn, None, None, None
    try:
        out = fn(samples)
    except BaseException as exc:  # noqa: BLE001 - report, keep the worker alive
        return None, *_raised(exc, label, seen), None
    logs = None
    if isinstance(out, BatchOutput):
        logs = {"columns": dict(out.columns), "metrics": dict(out.metrics)}
        out = out.values
    try:
        values = None if isinstance(out, str | bytes | dict) else list(out)
    except TypeError:
        values = None
    if values is None or len(values) != len(samples):
        got = f"{len(values)} values" if values is not None else clip(repr(out), 80)
        return (
            None,
            f"reward {label!r} returned {got} for a batch of {len(samples)} samples; a "
            "batched reward returns one value (a float or None) per sample, in order",
            None,
            None,
            None,
        )
    return [_checked(label, v) for v in values], None, None, None, logs


def clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 3] + "..."


__all__ = ["BatchReply", "build_reward", "call_batch", "call_reward", "clip"]
