"""The reward of the functions given to :class:`rlvr.Trainer` (``rewards=[fn, ...]``), each
called as TRL calls it (:func:`rlvr.compat.trl.reward_call.call_trl_batch`).

A function given to :class:`rlvr.Trainer` becomes a ``rewards:`` entry of the reward
:data:`FUNCTION_REWARD` and runs, as every reward does, in the reward worker processes, so a
call that hangs or crashes costs that call, not the run. A worker cannot import a function
defined in a notebook (its ``__main__`` has no file) nor in a script (the script would run
again), so :class:`FunctionFactory` sends each function that is not importable by name *by
value*: its code and the globals it uses, pickled with ``dill`` (a dependency of ``datasets``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import dill
from pydantic import Field

from rlvr.api.hookspecs import hookimpl
from rlvr.api.registration import Params, Reward, Sample
from rlvr.api.runtime import BatchOutput
from rlvr.compat.trl.reward_call import Format, call_trl_batch

#: The reward of the functions given to :class:`rlvr.Trainer` (``rewards=[fn, ...]``).
FUNCTION_REWARD = "function"
#: How a batched TRL-style reward is batched: every completion scored together (a training
#: step's on this rank, as TRL's one call per generation batch; an eval batch), or per prompt.
Batching = Literal["step", "group"]
BATCH_MODES: dict[str, Literal["call", "group"]] = {"step": "call", "group": "group"}


class FunctionParams(Params):
    """Which of :class:`rlvr.Trainer`'s reward functions, and how it is called."""

    function: str = Field(description="the function, as module:qualname (for the record)")
    index: int = Field(ge=0, description="its place in rlvr.Trainer(rewards=[...])")
    format: Format = Field("auto", description="TRL dataset format (see trl_inputs)")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword arguments passed on every call"
    )
    batch: Batching = Field(
        "step",
        description="step: one call on every completion of a step (on this rank), as TRL; "
        "group: one call per prompt's completions",
    )


class FunctionReward:
    """One reward function called on a batch of samples (a :class:`rlvr.plugin.BatchRewardFn`)."""

    def __init__(self, fn: Callable[..., Any], params: FunctionParams) -> None:
        self.fn = fn
        self.params = params

    def __call__(self, samples: list[Sample]) -> BatchOutput:
        p = self.params
        return call_trl_batch(self.fn, samples, format=p.format, kwargs=p.kwargs, name=p.function)


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
                batched=True,
                batch=lambda params: BATCH_MODES[params.batch],
            )
        )


__all__ = [
    "BATCH_MODES",
    "FUNCTION_REWARD",
    "Batching",
    "FunctionFactory",
    "FunctionParams",
    "FunctionPlugin",
    "FunctionReward",
    "unpicklable",
]
