"""``verifiers``: train on a `verifiers <https://github.com/PrimeIntellect-ai/verifiers>`_ 0.4
environment, loaded by its taskset id.

verifiers 0.4 (``verifiers.v1``) runs an episode itself: ``Env.run_episode`` provisions a
runtime, launches the taskset's harness (a chat loop, a coding agent...), and the harness reaches
the model through an OpenAI-compatible endpoint, by way of verifiers' interception server, whose
client relays each ``/v1/chat/completions`` request to the run's ``base_url``. When the harness
is done, the task's ``@vf.reward`` functions score the trace.

The adapter is that ``base_url``, in-process: a small HTTP server on 127.0.0.1 (an ephemeral
port, on rlvr's environment event loop) that answers each chat completion with the **next turn
of rlvr's episode**. Each request is routed to its episode by the model name (one per episode)
and parked; the episode runner (:mod:`rlvr.rollout.episodes`) sees it as the environment's
messages, samples the assistant turn with rlvr's backend, continuing from the exact token ids so
far, and ``respond`` sends the sampled text back as the completion. So rlvr owns the token layer
exactly as for its own environments: what is trained is the sampled ids (with the sampler's
log-probs) plus the chat template's tokens for what the harness added (tool results, user
turns; loss mask 0). Nothing is re-tokenized from the harness's conversation, and no token
crosses HTTP: only text does, the way it reaches any OpenAI-compatible model.

The first request's messages (the harness's system and user prompt) are the episode's prompt;
each later request must repeat the conversation so far and add messages after it, which
become the environment's turn. A harness that rewrites earlier messages (compaction, a
re-rendered history) fails its episode: its conversation is no longer the tokens rlvr sampled.
When the harness finishes, the trace's rewards (score x weight, by name) are the episode's
environment rewards; an episode whose trace ends in an error fails (left out of the step).

A streaming request (verifiers' own chat program streams) gets the whole turn as one chunk.
Other dialects (Anthropic messages, the Responses API) are not served: their harnesses fail
their episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from rlvr import RlvrError
from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo
from rlvr.plugins.environments.params import VerifiersParams

INSTALL_HINT = (
    "the verifiers environment needs verifiers 0.4: pip install 'rlvr[verifiers]' "
    "(and the environment's own package, e.g. prime env install <owner>/<name>)"
)

#: The model name prefix that routes a request to its episode.
_MODEL_PREFIX = "rlvr-episode-"


@dataclass
class _Request:
    """A chat completion the harness is waiting on."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    reply: asyncio.Future[dict[str, Any]]


@dataclass
class _Episode:
    """One verifiers episode in flight: its task running ``Env.run_episode`` and the
    requests it sends, in order."""

    model: str
    requests: asyncio.Queue[_Request] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[Any] | None = None
    pending: _Request | None = None
    #: the conversation rlvr has tokens for: the requests' messages and the replies.
    conversation: list[Message] = field(default_factory=list)
    calls: int = 0


class VerifiersEnvironment:
    """A verifiers 0.4 environment as an rlvr environment (see the module doc)."""

    def __init__(self, params: VerifiersParams, run: RunInfo):
        try:  # optional heavy dependency: only this environment needs it
            import verifiers.v1 as vf
        except ImportError as exc:
            raise RlvrError(f"{INSTALL_HINT} ({exc})") from exc
        self.vf = vf
        self.params = params
        agent: dict[str, Any] = {"runtime": dict(params.runtime)}
        if params.harness is not None:
            agent["harness"] = dict(params.harness)
        raw: dict[str, Any] = {"taskset": {"id": params.env, **params.args}, "agent": agent}
        try:
            self.config = vf.resolve_env_config(raw)
            self.env = vf.load_environment(self.config)
            tasks = self.env.taskset
            if not tasks.bounded:
                tasks = tasks.take(params.max_tasks)
            self.tasks = list(tasks)
        except (ImportError, ValueError, TypeError, AttributeError) as exc:
            raise RlvrError(
                f"environment verifiers: cannot load verifiers environment {params.env!r}: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; is its "
                "package installed, and are environment.params.args its taskset's fields?"
            ) from exc
        if not self.tasks:
            raise RlvrError(f"environment verifiers: {params.env!r} has no tasks")
        self.episodes: dict[str, _Episode] = {}
        self._started: asyncio.Task[str] | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.base_url = ""

    # ------------------------------------------------------------------ the rows

    def rows(self) -> list[dict[str, Any]]:
        """One dataset row per task: its prompt text (what rlvr's prompt filters read), its
        index (``params.task_field``, which picks the task an episode runs), and the task
        data's own plain fields (an ``answer``..., and ``id``/``name`` when set), which rlvr's
        own rewards may read."""
        rows = []
        for k, t in enumerate(self.tasks):
            data = t.data.model_dump(mode="json", exclude_none=True)
            row = {
                key: value
                for key, value in data.items()
                if isinstance(value, str | int | float | bool)
                and (key not in self.vf.TaskData.model_fields or key in ("id", "name"))
            }
            rows.append({**row, "prompt": t.data.prompt_text, self.params.task_field: k})
        return rows

    def _task(self, row: dict[str, Any]) -> Any:
        key = row.get(self.params.task_field)
        if not isinstance(key, int) or isinstance(key, bool):
            raise ValueError(
                f"the row has no integer {self.params.task_field!r} field naming its verifiers "
                f"task (0..{len(self.tasks) - 1}); write the rows with "
                "rlvr.plugins.environments.verifiers.write_rows"
            )
        return self.tasks[key % len(self.tasks)]

    # ------------------------------------------------------------------ EnvironmentImpl

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        task = self._task(row)
        await self._serve()
        state = _Episode(model=_MODEL_PREFIX + uuid.uuid4().hex)
        self.episodes[state.model] = state
        ctx = self.vf.ModelContext(
            model=state.model,
            client=self.vf.EvalClientConfig(
                base_url=self.base_url, api_key_var="RLVR_VERIFIERS_API_KEY"
            ),
        )
        state.task = asyncio.create_task(self.env.run_episode(task, ctx))
        request = await self._next(state)
        if request is None:
            raise RuntimeError(self._no_model_call(state))
        state.conversation = list(request.messages)
        return EpisodeStart(messages=list(request.messages), tools=request.tools, state=state)

    async def respond(self, state: _Episode, message: Message) -> EnvResponse:
        request = state.pending
        if request is None:
            raise RuntimeError("no model call is waiting for this reply")
        state.pending = None
        content = str(message.get("content") or "")
        request.reply.set_result(_completion(state.model, content, message.get("tool_calls")))
        state.conversation.append({"role": "assistant", "content": content})
        following = await self._next(state)
        if following is None:
            return EnvResponse(done=True, rewards=self._rewards(state))
        new = _added(state.conversation, following.messages)
        state.conversation = list(following.messages)
        return EnvResponse(messages=new)

    async def close(self, state: _Episode) -> None:
        """Ends a harness rlvr stopped (max_turns, a cut turn): its waiting call gets an
        error, its episode task is cancelled."""
        self.episodes.pop(state.model, None)
        if state.pending is not None and not state.pending.reply.done():
            state.pending.reply.set_exception(ConnectionAbortedError("the episode ended"))
        if state.task is not None and not state.task.done():
            state.task.cancel()
            with contextlib.suppress(BaseException):
                await state.task

    async def aclose(self) -> None:
        """Stops the endpoint and the env's serving resources (on the loop that started
        them); episodes still running are cancelled."""
        for state in list(self.episodes.values()):
            await self.close(state)
        if self._stack is not None:
            stack, self._stack, self._started = self._stack, None, None
            await stack.aclose()

    # ------------------------------------------------------------------ the bridge

    async def _next(self, state: _Episode) -> _Request | None:
        """The episode's next model call, or None when its harness finished."""
        assert state.task is not None
        get = asyncio.ensure_future(state.requests.get())
        await asyncio.wait({get, state.task}, return_when=asyncio.FIRST_COMPLETED)
        if get.done():
            state.pending = get.result()
            state.calls += 1
            return state.pending
        get.cancel()
        return None

    def _rewards(self, state: _Episode) -> dict[str, float]:
        assert state.task is not None
        episode = state.task.result()
        errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
        if errors or not episode.ok:
            why = errors[-1] if errors else None
            raise RuntimeError(
                "the verifiers episode failed"
                + (f": {why.type}: {why.message}" if why is not None else "")
            )
        rewards: dict[str, float] = {}
        for trace in episode.traces:
            for name, reward in trace.rewards.items():
                if reward is not None:
                    rewards[name] = rewards.get(name, 0.0) + float(reward.value)
        return rewards

    def _no_model_call(self, state: _Episode) -> str:
        assert state.task is not None
        if state.task.cancelled():
            return "the verifiers episode was cancelled before its first model call"
        exc = state.task.exception()
        if exc is not None:
            return f"the verifiers episode raised {type(exc).__name__}: {exc}"
        episode = state.task.result()
        errors = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
        if errors:
            return f"the verifiers episode failed: {errors[-1].type}: {errors[-1].message}"
        return "the verifiers harness ended without calling the model"

    async def _serve(self) -> None:
        """Start (once per event loop) the endpoint and the env's serving resources. A new
        loop (rlvr replaces one an environment call blocked) gets its own: the old one's
        handlers cannot hand requests to this loop's episodes."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            old, stack = self._loop, self._stack
            if stack is not None and old is not None and old.is_running():
                asyncio.run_coroutine_threadsafe(stack.aclose(), old)
            self._loop, self._stack, self._started = loop, None, None
        if self._started is None:
            self._started = asyncio.ensure_future(self._open())
        self.base_url = await asyncio.shield(self._started)

    async def _open(self) -> str:
        from aiohttp import web  # a dependency of verifiers: present when it is

        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        stack = contextlib.AsyncExitStack()
        stack.push_async_callback(runner.cleanup)
        await stack.enter_async_context(self.env.serving())
        self._stack = stack
        return f"http://127.0.0.1:{port}/v1"

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web  # a dependency of verifiers, as in _open

        body = await request.json()
        state = self.episodes.get(str(body.get("model", "")))
        if state is None:
            return web.json_response(
                {"error": {"message": f"no rlvr episode for model {body.get('model')!r}"}},
                status=404,
            )
        call = _Request(
            messages=[_message(m) for m in body.get("messages") or []],
            tools=body.get("tools") or None,
            reply=asyncio.get_running_loop().create_future(),
        )
        await state.requests.put(call)
        try:
            reply = await call.reply
        except ConnectionAbortedError as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=499)
        if not body.get("stream"):
            return web.json_response(reply)
        # A streaming client (verifiers' own chat program streams) gets the whole turn as
        # one chunk: rlvr samples a turn at once.
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for chunk in _chunks(reply, usage):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _message(m: dict[str, Any]) -> Message:
    """A request message as the chat template takes it: text content as a string, tool
    calls' arguments as objects."""
    out: Message = {k: v for k, v in m.items() if v is not None}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    calls = out.get("tool_calls")
    if calls:
        fixed = []
        for c in calls:
            fn = dict(c.get("function") or {})
            if isinstance(fn.get("arguments"), str):
                with contextlib.suppress(json.JSONDecodeError):
                    fn["arguments"] = json.loads(fn["arguments"])
            fixed.append({**c, "function": fn})
        out["tool_calls"] = fixed
    return out


def _added(conversation: list[Message], messages: list[Message]) -> list[Message]:
    """The messages the harness added after the conversation so far. Its earlier messages
    must be the ones rlvr has tokens for (the assistant's by position: they are rlvr's own,
    echoed); a harness that changed them fails the episode."""
    if len(messages) <= len(conversation):
        raise RuntimeError(
            f"the harness sent {len(messages)} messages after a conversation of "
            f"{len(conversation)}: it dropped or compacted earlier turns, so its conversation is "
            "no longer the tokens rlvr sampled"
        )
    for k, (ours, theirs) in enumerate(zip(conversation, messages, strict=False)):
        same_role = ours.get("role") == theirs.get("role")
        if not same_role or (
            ours.get("role") != "assistant" and ours.get("content") != theirs.get("content")
        ):
            raise RuntimeError(
                f"the harness rewrote message {k} ({ours.get('role')}) of the conversation: "
                "its conversation is no longer the tokens rlvr sampled"
            )
    return messages[len(conversation) :]


def _completion(model: str, content: str, tool_calls: Any) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` object for a sampled assistant turn."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = [c for c in tool_calls or [] if "error" not in c and c["function"]["name"]]
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": json.dumps(c["function"]["arguments"]),
                },
            }
            for c in calls
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": None,
    }


def _chunks(reply: dict[str, Any], usage: bool) -> list[dict[str, Any]]:
    """A ``chat.completion`` as the ``chat.completion.chunk`` events of a stream."""
    choice = reply["choices"][0]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(delta["tool_calls"])]
    head = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        head | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if usage:  # rlvr's token counts are not known here: the endpoint only sees text
        counts = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        chunks.append(head | {"choices": [], "usage": counts})
    return chunks


def write_rows(env: str, path: str, args: dict[str, Any] | None = None) -> int:
    """Write the dataset of a verifiers environment (one row per task) to ``path`` as JSON
    lines, for ``data.path``; returns how many rows."""
    params = VerifiersParams(env=env, args=args or {})
    built = VerifiersEnvironment(params, RunInfo(max_completion_length=1, num_generations=1))
    rows = built.rows()
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)


__all__ = ["INSTALL_HINT", "VerifiersEnvironment", "write_rows"]
