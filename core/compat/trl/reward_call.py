"""Reward functions written for TRL, called on rlvr's samples as TRL 1.16 calls them.

TRL's ``GRPOTrainer`` calls a reward function on a batch as ``fn(prompts=[...],
completions=[...], completion_ids=[[int, ...], ...], **columns, trainer_state=...,
log_extra=..., log_metric=...)`` (every dataset column but ``prompt``, ``completion`` and
``completion_ids``, as a list) and expects one float or ``None`` per completion; an ``async
def`` function is awaited. :func:`call_trl_batch` calls one the same way on a batch of rlvr
samples; the ``callable`` reward plugin (a function named in the config) and
:class:`rlvr.Trainer`'s ``rewards=[fn, ...]`` (a function object) are batched rewards that go
through it (:class:`rlvr.plugin.BatchRewardFn`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeGuard

from rlvr.api.registration import Sample
from rlvr.api.runtime import BatchOutput, TrainerState
from rlvr.api.usercode import function_name

#: Row fields TRL does not pass on as keyword arguments.
RESERVED = ("prompt", "completion", "completion_ids")

Format = Literal["auto", "standard", "conversational"]


def is_messages(value: Any) -> TypeGuard[list[Any]]:
    """Whether ``value`` is a chat: a list of ``{role, content}`` mappings."""
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value)


def trl_inputs(
    samples: Sequence[Sample], format: Format = "auto"
) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    """``(prompts, completions, columns)`` of ``samples`` as TRL hands them to a reward.

    ``format`` follows TRL's dataset formats: ``standard`` passes the prompt and completion
    texts; ``conversational`` passes message lists (the row's own ``prompt`` messages when it
    has them, else one user message; the completion as one assistant message); ``auto`` is
    conversational when the row's ``prompt`` is a list of messages, as TRL decides. ``columns``
    has every row field but ``prompt``, ``completion`` and ``completion_ids``, as a list (None
    where a row lacks it)."""
    prompts: list[Any] = []
    completions: list[Any] = []
    for sample in samples:
        row_prompt = sample.row.get("prompt")
        chat = format == "conversational" or (format == "auto" and is_messages(row_prompt))
        if chat:
            prompts.append(
                list(row_prompt)
                if is_messages(row_prompt)
                else [{"role": "user", "content": sample.prompt}]
            )
            completions.append([{"role": "assistant", "content": sample.completion}])
        else:
            prompts.append(sample.prompt)
            completions.append(sample.completion)
    keys = list(dict.fromkeys(k for s in samples for k in s.row if k not in RESERVED))
    columns = {k: [s.row.get(k) for s in samples] for k in keys}
    return prompts, completions, columns


def _await(awaitable: Awaitable[Any]) -> Any:
    """The result of ``awaitable``: ``asyncio.run`` here, or in a thread of its own when this
    thread already runs an event loop (a notebook with ``reward_workers: 0``)."""

    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def call_trl_batch(
    fn: Callable[..., Any],
    samples: Sequence[Sample],
    *,
    format: Format = "auto",
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> BatchOutput:
    """``fn`` called on ``samples`` as TRL's GRPOTrainer calls a reward function: its values
    (one float or None per sample, in order) and what it logged.

    Prompts, completions and columns as :func:`trl_inputs` makes them; ``completion_ids`` the
    samples' token ids (None when no sample has any, e.g. ``rlvr rewards score`` of a file of
    texts); ``trainer_state`` the first sample's ``state``; ``log_extra(column, values)`` (one
    value per sample) and ``log_metric(name, value)`` are recorded in the returned
    :class:`~rlvr.api.runtime.BatchOutput`. ``kwargs`` win over a column of the same name. A
    function that returns an awaitable (``async def``) is awaited. ``name`` names ``fn`` in the
    error a wrong return value raises."""
    samples = list(samples)
    prompts, completions, rows = trl_inputs(samples, format)
    ids = [None if s.completion_ids is None else list(s.completion_ids) for s in samples]
    completion_ids = None if all(i is None for i in ids) else ids
    columns: dict[str, Any] = {**rows, **(kwargs or {})}
    logged: dict[str, list[Any]] = {}
    metrics: dict[str, list[float]] = {}

    def log_extra(column: str, values: Sequence[Any]) -> None:
        values = list(values)
        if len(values) != len(samples):
            raise ValueError(
                f"log_extra({column!r}, ...) got {len(values)} values for a batch of "
                f"{len(samples)} completions; pass one value per completion"
            )
        logged[str(column)] = values

    def log_metric(metric: str, value: float) -> None:
        metrics.setdefault(str(metric), []).append(float(value))

    columns.update(trainer_state=samples[0].state if samples else TrainerState())
    columns.update(log_extra=log_extra, log_metric=log_metric)
    out = fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
    if inspect.isawaitable(out):
        out = _await(out)
    if isinstance(out, str | bytes) or not hasattr(out, "__len__") or len(out) != len(samples):
        got = f"{len(out)} values" if hasattr(out, "__len__") else repr(out)[:80]
        raise TypeError(
            f"{name or function_name(fn)} returned {got} for {len(samples)} completions; a TRL "
            "reward function returns a list with one float (or None) per completion"
        )
    return BatchOutput(list(out), logged, metrics)


def call_trl_reward(
    fn: Callable[..., Any],
    sample: Sample,
    *,
    format: Format = "auto",
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> float | None:
    """``fn`` called on one sample (a batch of one) as :func:`call_trl_batch` calls it: its
    one value (a float or None); what it logs is dropped."""
    out = call_trl_batch(fn, [sample], format=format, kwargs=kwargs, name=name)
    return out.values[0]


__all__ = ["RESERVED", "Format", "call_trl_batch", "call_trl_reward", "is_messages", "trl_inputs"]
