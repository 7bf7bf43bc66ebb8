"""``openenv``: an OpenEnv environment (``reset``/``step``, Gym style) as an rlvr environment.

OpenEnv (the ``openenv-core`` package, ``import openenv``) defines an environment as an
``Environment`` subclass with ``reset(seed, episode_id, **kwargs) -> Observation`` and
``step(action) -> Observation``, where ``Action``/``Observation`` are pydantic models and an
observation carries ``done`` and ``reward``. It is served by ``create_app`` (FastAPI) and
reached by ``EnvClient``/``GenericEnvClient`` over a WebSocket, one session per connection.
This adapter drives one episode per session:

- ``url``: a running server; each episode opens a ``GenericEnvClient`` session (actions and
  observations as plain dicts, so nothing of the environment's own package is needed here);
- ``environment``: an ``Environment`` class run in this process, one instance per episode,
  its sync methods in a worker thread (an overridden ``reset_async``/``step_async`` is
  awaited). The observation goes through OpenEnv's own ``serialize_observation`` and the action
  through ``deserialize_action``, so both ways see exactly what a server would send.

The mapping is by params: the assistant message's text goes into the action field
``action_field`` (with ``action_extra``); an observation becomes a user message
(``observation_field``, or the only text field, or the observation as JSON); the step rewards
become the named reward ``reward_name`` (summed, or the last); ``done`` ends the episode.
With ``tools`` (an ``MCPEnvironment``), the environment's ``list_tools`` are the model's tools,
each parsed tool call is a ``call_tool`` step answered by a ``tool`` message, and an answer
without a call ends the episode.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from typing import Any

from openenv.core import GenericEnvClient
from openenv.core.env_server import (
    Action,
    Environment,
    deserialize_action,
    serialize_observation,
)
from websockets.exceptions import ConnectionClosed

from rlvr._builtin import load_function
from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo
from rlvr.plugins.environments.params import OpenEnvParams


def action_class_of(env_cls: type, *, tools: bool = False) -> type[Action]:
    """The ``Action`` type argument of ``env_cls``'s ``Environment[Act, Obs, State]`` base
    (with ``tools``, the base ``Action`` when it has none: an MCP environment's actions are
    OpenEnv's own ``list_tools``/``call_tool``, which ``deserialize_action`` then routes)."""
    for klass in env_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Environment:
                args = typing.get_args(base)
                if args and isinstance(args[0], type) and issubclass(args[0], Action):
                    return args[0]
    if tools:
        return Action
    raise TypeError(
        f"{env_cls.__name__} does not subclass Environment[YourAction, YourObservation, State]; "
        "name its Action class in params.action_class"
    )


def observation_text(observation: dict[str, Any], field: str | None) -> str:
    """The user message an observation (its serialized fields) becomes."""
    fields = {k: v for k, v in observation.items() if k != "metadata"}
    if field is not None:
        if field not in fields:
            raise KeyError(
                f"the observation has no field {field!r} (it has {sorted(fields)}); "
                "set params.observation_field"
            )
        value = fields[field]
        return value if isinstance(value, str) else json.dumps(value)
    texts = [v for v in fields.values() if isinstance(v, str)]
    if len(texts) == 1:
        return texts[0]
    return json.dumps(fields, default=str)


def tool_result_text(observation: dict[str, Any]) -> str:
    """What a ``call_tool`` observation tells the model: the tool's text content (MCP's
    ``CallToolResult``, as an object in process or a dict off the wire), or its error."""
    error = observation.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else getattr(error, "message", "")
        return f"error: {message or error}"
    result = observation.get("result")
    if result is None:
        return ""
    content = (
        result.get("content") if isinstance(result, dict) else getattr(result, "content", None)
    )
    if isinstance(content, list) and content:
        parts = [
            p.get("text") if isinstance(p, dict) else getattr(p, "text", None) for p in content
        ]
        texts = [p for p in parts if isinstance(p, str)]
        if len(texts) == len(parts):
            return "".join(texts)
    return result if isinstance(result, str) else json.dumps(result, default=str)


def tool_schemas(observation: dict[str, Any]) -> list[dict[str, Any]]:
    """A ``list_tools`` observation's tools as the chat template's function schemas."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description") or "",
                "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for tool in observation.get("tools") or []
    ]


class _Local:
    """One in-process ``Environment`` instance behind the same calls as a client session."""

    def __init__(self, env: Any, action_cls: type[Action]):
        self.env = env
        self.action_cls = action_cls

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        overridden = getattr(type(self.env), f"{name}_async") is not getattr(
            Environment, f"{name}_async"
        )
        if overridden:
            observation = await getattr(self.env, f"{name}_async")(*args, **kwargs)
        else:  # a sync method may block: keep it off the episodes' event loop
            observation = await asyncio.to_thread(getattr(self.env, name), *args, **kwargs)
        return serialize_observation(observation)

    async def reset(self, **kwargs: Any) -> dict[str, Any]:
        return await self._call("reset", **kwargs)

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return await self._call("step", deserialize_action(action, self.action_cls))

    async def close(self) -> None:
        await asyncio.to_thread(self.env.close)


class _Remote:
    """One WebSocket session on an OpenEnv server (``GenericEnvClient``)."""

    def __init__(self, client: GenericEnvClient):
        self.client = client

    @staticmethod
    def _payload(result: Any) -> dict[str, Any]:
        return {
            "observation": result.observation,
            "reward": result.reward,
            "done": result.done,
        }

    async def reset(self, **kwargs: Any) -> dict[str, Any]:
        try:
            return self._payload(await self.client.reset(**kwargs))
        except ConnectionClosed as exc:  # the server's refusal may arrive as a bare close
            raise RuntimeError(
                f"the OpenEnv server closed the session at reset ({exc}); a server at capacity "
                "does this: it must allow one session per episode of a step"
            ) from None

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return self._payload(await self.client.step(action))

    async def close(self) -> None:
        await self.client.close()


class OpenEnvEnvironment:
    """Runs each episode in its own OpenEnv session (a server's, or an in-process instance)."""

    def __init__(self, params: OpenEnvParams, run: RunInfo):
        self.params = params
        self.env_cls: type | None = None
        self.action_cls: type[Action] | None = None
        if params.environment is not None:
            env_cls = load_function(params.environment)
            if not (inspect.isclass(env_cls) and issubclass(env_cls, Environment)):
                raise TypeError(
                    f"{params.environment!r} is not an OpenEnv Environment subclass "
                    "(openenv.core.env_server.Environment)"
                )
            self.env_cls = env_cls
            if params.action_class is not None:
                action_cls = load_function(params.action_class)
                if not (inspect.isclass(action_cls) and issubclass(action_cls, Action)):
                    raise TypeError(f"{params.action_class!r} is not an OpenEnv Action class")
                self.action_cls = action_cls
            else:
                self.action_cls = action_class_of(env_cls, tools=params.tools)

    async def _open(self) -> _Local | _Remote:
        if self.env_cls is not None:
            assert self.action_cls is not None
            env = await asyncio.to_thread(self.env_cls)
            return _Local(env, self.action_cls)
        assert self.params.url is not None
        client = GenericEnvClient(
            base_url=self.params.url, message_timeout_s=self.params.message_timeout
        )
        await client.connect()
        return _Remote(client)

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        p = self.params
        state: dict[str, Any] = {"session": None, "rewards": []}
        try:
            state["session"] = await self._open()
            missing = [f for f in p.reset_fields if f not in row]
            if missing:
                raise KeyError(f"reset_fields {missing} are not columns of the dataset row")
            kwargs = {**p.reset_kwargs, **{f: row[f] for f in p.reset_fields}}
            result = await state["session"].reset(**kwargs)
            tools = None
            if p.tools:
                listed = await state["session"].step({"type": "list_tools"})
                tools = tool_schemas(listed["observation"])
                if not tools:
                    raise RuntimeError(
                        "list_tools returned no tools; is it an MCP environment? "
                        f"(its observation: {listed['observation']})"
                    )
        except BaseException:
            await self._release(state)
            raise
        messages: list[Message] = [dict(m) for m in prompt]
        text = observation_text(result["observation"], p.observation_field)
        if p.first_observation == "append" and messages and messages[-1]["role"] == "user":
            messages[-1]["content"] = f"{messages[-1]['content']}{text}"
        elif p.first_observation != "ignore":
            messages.append({"role": "user", "content": text})
        return EpisodeStart(messages=messages, tools=tools, state=state)

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        p = self.params
        if p.tools:
            return await self._tool_calls(state, message)
        action = {**p.action_extra, p.action_field: message["content"]}
        result = await state["session"].step(action)
        reply: Message = {
            "role": "user",
            "content": observation_text(result["observation"], p.observation_field),
        }
        return EnvResponse(
            messages=[reply], done=bool(result["done"]), rewards=self._reward(state, result)
        )

    async def _tool_calls(self, state: Any, message: Message) -> EnvResponse:
        """An MCP environment's turn: each tool call is a ``call_tool`` step; an answer
        without a call ends the episode."""
        calls = message.get("tool_calls") or []
        if not calls:
            return EnvResponse(done=True, rewards=self._reward(state, None))
        replies: list[Message] = []
        rewards: dict[str, float] = {}
        done = False
        for call in calls:
            name = call["function"]["name"]
            if "error" in call:
                replies.append({"role": "tool", "name": name, "content": f"error: {call['error']}"})
                continue
            action = {
                "type": "call_tool",
                "tool_name": name,
                "arguments": call["function"]["arguments"],
            }
            result = await state["session"].step(action)
            rewards = self._reward(state, result)
            replies.append(
                {"role": "tool", "name": name, "content": tool_result_text(result["observation"])}
            )
            if result["done"]:
                done = True
                break
        return EnvResponse(
            messages=replies, done=done, rewards=rewards or self._reward(state, None)
        )

    def _reward(self, state: Any, result: dict[str, Any] | None) -> dict[str, float]:
        """The episode's reward so far, after ``result``'s step (None: no new step)."""
        if result is not None and result["reward"] is not None:
            state["rewards"].append(float(result["reward"]))
        values = state["rewards"]
        if not values:
            return {}
        return {self.params.reward_name: sum(values) if self.params.reward == "sum" else values[-1]}

    async def close(self, state: Any) -> None:
        await self._release(state)

    @staticmethod
    async def _release(state: dict[str, Any]) -> None:
        session, state["session"] = state["session"], None
        if session is not None:
            await session.close()


__all__ = [
    "OpenEnvEnvironment",
    "action_class_of",
    "observation_text",
    "tool_result_text",
    "tool_schemas",
]
