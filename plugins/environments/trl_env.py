"""``trl_env``: a class written for TRL's ``GRPOTrainer(environment_factory=...)``, unchanged.

What TRL 1.16 does with such a class (``GRPOTrainer.__init__`` and
``_generate_and_score_completions``), and what this adapter does the same way:

- ``factory()`` (no arguments; usually the class itself) builds an instance; every rollout gets
  an instance of its own, taken from a pool and reused across steps ("construct once, reset
  often"): here one per live episode, returned to the pool when the episode closes.
- ``reset(**row)`` gets every column of the dataset row as keyword arguments; what it returns
  (``None`` or a string) is appended to the last user message of the prompt.
- Every public method of the class (on the class, not starting with ``_``) except ``reset``
  and ``get_reward`` is a tool: its schema comes from the type hints and Google-style
  docstring, sync methods run in a worker thread, ``async def`` ones are awaited. (Each sync
  call here gets a daemon thread of its own, :class:`rlvr.rollout.event_loop.DaemonThreads`: a
  ``reset`` that hangs fails its own episode at ``turn_timeout`` and nothing else, and never
  keeps the process alive after the run.)
- A tool's result goes back as ``{"role": "tool", "name", "content": str(result)}``; a tool
  that raises, or an unknown tool, gives ``str({"error": message})`` (TRL's own wording), so
  the model sees it and the episode goes on.
- The first assistant message without a tool call ends the episode.
- ``get_reward()`` (optional, sync or async), called once the rollout is done, is a reward
  named after the class with weight 1: here the environment reward ``<ClassName>``
  (``rewards/<ClassName>/...``), added to the configured rewards' weighted sum as TRL adds it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from rlvr._builtin import load_function, tool_error, tool_message, tool_names
from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo, tool_schema
from rlvr.plugins.environments.params import TrlEnvParams


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await an ``async def``; run a sync function in a worker thread (it may block)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


class TrlEnvironment:
    """Drives a TRL ``environment_factory`` class: one instance per live episode."""

    def __init__(self, params: TrlEnvParams, run: RunInfo):
        self.params = params
        self.factory = load_function(params.factory)
        probe = self.factory()  # TRL probes one instance too, and keeps it in the pool
        self.cls = type(probe)
        if not callable(getattr(probe, "reset", None)):
            raise TypeError(
                f"{params.factory!r} built a {self.cls.__name__} without a reset() method; "
                "TRL's environment_factory classes define reset(**row)"
            )
        self.tools = tool_names(self.cls)
        self.schemas = [tool_schema(getattr(probe, name)) for name in self.tools]
        self.reward_name = self.cls.__name__ if hasattr(probe, "get_reward") else None
        self.pool: list[Any] = [probe]

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        env = self.pool.pop() if self.pool else await asyncio.to_thread(self.factory)
        state: dict[str, Any] = {"env": env}
        try:
            observation = await _call(env.reset, **row)
        except asyncio.CancelledError:
            # timed out: its reset may still be running in its thread; the instance is not
            # handed to another episode (the pool builds a new one when it runs short)
            raise
        except BaseException:
            self.pool.append(env)
            raise
        messages: list[Message] = [dict(m) for m in prompt]
        if self.params.system_prompt and not (messages and messages[0]["role"] == "system"):
            messages.insert(0, {"role": "system", "content": self.params.system_prompt})
        if observation is not None:
            if not isinstance(observation, str):
                raise TypeError(
                    f"{self.cls.__name__}.reset() returned {type(observation).__name__}; rlvr "
                    "takes None or a string (text appended to the last user message)"
                )
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"] = f"{messages[-1]['content']}{observation}"
            else:
                messages.append({"role": "user", "content": observation})
        return EpisodeStart(messages=messages, tools=self.schemas, state=state)

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        env = state["env"]
        calls = message.get("tool_calls") or []
        if not calls:
            return EnvResponse(done=True)
        replies = [await self._run(env, call) for call in calls[: self.params.max_calls_per_turn]]
        return EnvResponse(messages=replies)

    async def group_rewards(
        self, states: list[Any], transcripts: list[list[Message]]
    ) -> list[dict[str, float]]:
        """``get_reward()`` once per episode when it has ended, however it ended (an answer, a
        turn cut at ``max_completion_length``, ``max_turns``), as TRL scores every rollout."""
        return [await self._reward(state["env"]) for state in states]

    async def close(self, state: Any) -> None:
        self.pool.append(state["env"])

    async def _reward(self, env: Any) -> dict[str, float]:
        if self.reward_name is None:
            return {}
        value = await _call(env.get_reward)
        return {} if value is None else {self.reward_name: float(value)}

    async def _run(self, env: Any, call: dict[str, Any]) -> Message:
        name = call["function"]["name"]
        if "error" in call:
            return tool_error(name, call["error"])
        if name not in self.tools:
            return tool_error(name, f"Tool {name} not found.")
        try:
            result = await _call(getattr(env, name), **call["function"]["arguments"])
        except Exception as exc:  # the tool's failure is the model's to see, as in TRL
            return tool_error(name, str(exc))
        return tool_message(name, str(result))


__all__ = ["TrlEnvironment"]
