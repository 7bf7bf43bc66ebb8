"""Reward functions written for TRL, called on rlvr's samples.

TRL's ``GRPOTrainer`` calls a reward function on a batch as ``fn(prompts=[...],
completions=[...], completion_ids=[...], **columns)`` (every dataset column but ``prompt``,
``completion`` and ``completion_ids``, as a list) and expects one float or ``None`` per
completion. :func:`call_trl_reward` calls one the same way on one rlvr sample (a batch of one);
the ``callable`` reward plugin (a function named in the config) and :class:`rlvr.Trainer`'s
``rewards=[fn, ...]`` (a function object) both go through it.

A function given to :class:`rlvr.Trainer` becomes a ``rewards:`` entry of the reward
:data:`FUNCTION_REWARD` and runs, as every reward does, in the reward worker processes, so a
call that hangs or crashes costs that call, not the run. A worker cannot import a function
defined in a notebook (its ``__main__`` has no file) nor in a script (the script would run
again), so :class:`FunctionFactory` sends each function that is not importable by name *by
value*: its code and the globals it uses, pickled with ``dill`` (a dependency of ``datasets``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeGuard

import dill
from pydantic import Field

from rlvr.api.hookspecs import hookimpl
from rlvr.api.registration import Params, Reward, Sample

#: Row fields TRL does not pass on as keyword arguments.
RESERVED = ("prompt", "completion", "completion_ids")
#: The reward of the functions given to :class:`rlvr.Trainer` (``rewards=[fn, ...]``).
FUNCTION_REWARD = "function"

Format = Literal["auto", "standard", "conversational"]


def is_messages(value: Any) -> TypeGuard[list[Any]]:
    """Whether ``value`` is a chat: a list of ``{role, content}`` mappings."""
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value)


def call_trl_reward(
    fn: Callable[..., Any],
    sample: Sample,
    *,
    format: Format = "auto",
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> float | None:
    """``fn`` called on ``sample`` as TRL's GRPOTrainer calls a reward function, on a batch of
    one: its one value (a float or None).

    ``format`` follows TRL's dataset formats: ``standard`` passes the prompt and completion
    texts; ``conversational`` passes message lists (the row's own ``prompt`` messages when it
    has them, else one user message; the completion as one assistant message); ``auto`` is
    conversational when the row's ``prompt`` is a list of messages, as TRL decides.
    ``completion_ids`` is None (rewards see text); ``kwargs`` win over a column of the same
    name. ``name`` names ``fn`` in the error a wrong return value raises."""
    row_prompt = sample.row.get("prompt")
    conversational = format == "conversational" or (format == "auto" and is_messages(row_prompt))
    if conversational:
        prompt: Any = (
            list(row_prompt)
            if is_messages(row_prompt)
            else [{"role": "user", "content": sample.prompt}]
        )
        completion: Any = [{"role": "assistant", "content": sample.completion}]
    else:
        prompt, completion = sample.prompt, sample.completion
    columns = {k: [v] for k, v in sample.row.items() if k not in RESERVED}
    columns.update(kwargs or {})
    out = fn(prompts=[prompt], completions=[completion], completion_ids=None, **columns)
    if isinstance(out, str | bytes) or not hasattr(out, "__len__") or len(out) != 1:
        raise TypeError(
            f"{name or function_name(fn)} returned {out!r}; a TRL reward function returns a "
            "list with one float (or None) per completion, and it was given one completion"
        )
    value = out[0]
    return None if value is None else value


def function_name(fn: Any) -> str:
    """``module:qualname`` of a function (``__main__:accuracy``), for configs and messages."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}"


# --------------------------------------------------------------------------- rlvr.Trainer's


class FunctionParams(Params):
    """Which of :class:`rlvr.Trainer`'s reward functions, and how it is called."""

    function: str = Field(description="the function, as module:qualname (for the record)")
    index: int = Field(ge=0, description="its place in rlvr.Trainer(rewards=[...])")
    format: Format = Field("auto", description="TRL dataset format (see call_trl_reward)")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword arguments passed on every call"
    )


class FunctionReward:
    """One reward function called on one sample (a :class:`rlvr.RewardFn`)."""

    def __init__(self, fn: Callable[..., Any], params: FunctionParams) -> None:
        self.fn = fn
        self.params = params

    def __call__(self, sample: Sample) -> float | None:
        p = self.params
        return call_trl_reward(self.fn, sample, format=p.format, kwargs=p.kwargs, name=p.function)


def _by_value(blob: bytes) -> FunctionFactory:
    return FunctionFactory(dill.loads(blob))


class FunctionFactory:
    """The factory of the :data:`FUNCTION_REWARD` reward: ``factory(params)`` is the function
    at ``params.index``. Pickled (to reach the reward workers) with dill, which keeps a
    function importable by name as a reference and sends any other (one from ``__main__``, a
    closure, a lambda) by value."""

    def __init__(self, functions: Sequence[Callable[..., Any]]) -> None:
        self.functions = list(functions)

    def __call__(self, params: FunctionParams) -> FunctionReward:
        return FunctionReward(self.functions[params.index], params)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_by_value, (dill.dumps(self.functions, recurse=True),))


def unpicklable(fn: Callable[..., Any]) -> str | None:
    """Why ``fn`` cannot be sent to a reward worker (dill's error), or None."""
    try:
        dill.dumps(fn, recurse=True)
    except Exception as exc:  # dill raises whatever the object's pickling raises
        return f"{type(exc).__name__}: {exc}"
    return None


class FunctionPlugin:
    """Registers the :data:`FUNCTION_REWARD` reward for ``functions`` (a plugin object that
    :class:`rlvr.Trainer` adds to its host)."""

    def __init__(self, functions: Sequence[Callable[..., Any]]) -> None:
        self.factory = FunctionFactory(functions)

    @hookimpl
    def rlvr_register_rewards(self, register: Callable[[Reward], None]) -> None:
        register(
            Reward(
                name=FUNCTION_REWARD,
                params=FunctionParams,
                factory=self.factory,
                description="A Python reward function given to rlvr.Trainer(rewards=[...]), "
                "called as TRL calls it.",
            )
        )


__all__ = [
    "FUNCTION_REWARD",
    "RESERVED",
    "FunctionFactory",
    "FunctionParams",
    "FunctionPlugin",
    "FunctionReward",
    "call_trl_reward",
    "function_name",
    "is_messages",
    "unpicklable",
]
