"""Checking an environment plugin: the conformance checks a published environment should pass,
and a few episodes against a policy, printed with their loss mask (``rlvr env check``).

:func:`check_episodes` drives the protocol without a model: it starts episodes on a few rows,
answers them with scripted assistant messages, and checks what comes back (an
:class:`~rlvr.api.runtime.EpisodeStart` with messages, valid tool schemas, an
:class:`~rlvr.api.runtime.EnvResponse` with finite named rewards, a ``close`` that works even
right after ``start``), each output by training's own validator
(:mod:`rlvr.rollout.env_outputs`) and each call on training's event loop with its timeout (a
call that blocks the loop fails the check instead of hanging it). It then runs two episodes
concurrently and compares one of them with the same episode run alone: an environment that
keeps an episode's state on itself instead of in ``state`` gives another answer when a second
episode runs beside it, which is what training does (the episodes of a group share one
environment object). ``rlvr.testing.check_environment`` and ``rlvr env check`` both call it;
every problem is an :class:`EnvironmentCheckError` saying what to fix.

``rlvr env check`` then runs real episodes through the trainer's own
:class:`~rlvr.rollout.episodes.EpisodeRunner` (the same rendering, tokenizing and loss mask),
sampling from a model or replaying a script (:class:`ScriptedGenerator`), and
:func:`format_episode` shows which tokens would be trained.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginError, build_environment
from rlvr.api.registration import Environment
from rlvr.api.runtime import (
    EnvResponse,
    EpisodeStart,
    Generation,
    Message,
    RunInfo,
    SamplingParams,
)
from rlvr.config.schema import DataConfig
from rlvr.data.prompts import prompt_messages
from rlvr.rollout.env_outputs import response_problem, reward_values, start_problem
from rlvr.rollout.episodes import Episode
from rlvr.rollout.event_loop import EnvironmentLoop
from rlvr.rollout.tools import parse_tool_calls

#: Rows the checks start episodes on when none are given: a prompt and an ``answer`` field.
DEFAULT_ROWS: tuple[dict[str, Any], ...] = (
    {"prompt": "What is 6 * 7? Answer with the number.", "answer": "42"},
    {
        "prompt": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
        "many clips in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "72",
    },
)

#: The assistant messages the checks send when no script is given, in order: what a model
#: may write (plain text, a call to an unknown tool, a malformed call, an answer). An
#: environment answers each, or ends the episode; it should not raise on any of them.
DEFAULT_SCRIPT: tuple[str, ...] = (
    "Let me think about it.",
    '<tool_call>{"name": "no_such_tool", "arguments": {"x": 1}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {oops</tool_call>',
    "The answer is 42.",
)


class EnvironmentCheckError(RlvrError, AssertionError):
    """An environment does not follow the episode protocol; the message says what to fix.

    An :class:`AssertionError` (a failed check in a plugin's tests) and an
    :class:`~rlvr.api.errors.RlvrError` (one ``error:`` line from ``rlvr env check``)."""


@dataclass
class Transcript:
    """One episode the conformance checks ran: its conversation, rewards and ending."""

    row: dict[str, Any]
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    turns: int = 0
    done: bool = False
    seconds: float = 0.0


def assistant_message(text: str, tool_call_format: str = "hermes") -> Message:
    """The assistant message an environment receives for ``text``, tool calls parsed as the
    episode runner parses them."""
    message: Message = {"role": "assistant", "content": text}
    calls = parse_tool_calls(text, tool_call_format)
    if calls:
        message["tool_calls"] = calls
    return message


def row_prompt(row: Mapping[str, Any], data: DataConfig | None = None) -> list[Message]:
    """The conversation the data config makes of ``row`` (what ``start`` receives)."""
    return prompt_messages(row, data or DataConfig(path="-", chat_template=True))


# --------------------------------------------------------------------------- conformance


def check_episodes(
    record: Environment,
    params: Any,
    *,
    rows: Sequence[Mapping[str, Any]] | None = None,
    script: Sequence[str] | None = None,
    run: RunInfo | None = None,
    timeout: float = 30.0,
    data: DataConfig | None = None,
) -> list[Transcript]:
    """Run the episode protocol of ``record`` (with validated ``params``) without a model and
    check each step; the episodes run alone, one per row, then two side by side. Raises
    :class:`EnvironmentCheckError`; returns the episodes run alone.

    Each call runs on training's :class:`~rlvr.rollout.event_loop.EnvironmentLoop` with
    ``timeout``, so a call that blocks the event loop (a synchronous ``time.sleep``) fails the
    check within about ``timeout`` seconds instead of hanging it, and every output goes through
    training's validator (:mod:`rlvr.rollout.env_outputs`)."""
    label = f"environment {record.name!r}" + (f" (from {record.dist})" if record.dist else "")
    given = [dict(r) for r in (rows if rows is not None else DEFAULT_ROWS)]
    if not given:
        raise ValueError("rows: give at least one dataset row")
    script = list(script if script is not None else DEFAULT_SCRIPT)
    if not script:
        raise ValueError("script: give at least one assistant message")
    run = run or RunInfo(max_completion_length=64, num_generations=2)
    try:
        env = build_environment(record, params, run)
    except PluginError as exc:
        raise EnvironmentCheckError(str(exc)) from None
    except Exception as exc:
        raise EnvironmentCheckError(
            f"{label}: factory(params, run) raised {type(exc).__name__}: {exc}"
        ) from exc
    checker = _Checker(label, env, script, timeout, data, record.rewards(params))
    try:
        return checker.all(given)
    finally:
        checker.loop.close()


class _Checker:
    def __init__(
        self,
        label: str,
        env: Any,
        script: list[str],
        timeout: float,
        data: DataConfig | None,
        declared: tuple[str, ...] | None,
    ):
        self.label, self.env, self.script = label, env, script
        self.timeout, self.data, self.declared = timeout, data, declared
        self.loop = EnvironmentLoop()

    def fail(self, message: str) -> EnvironmentCheckError:
        return EnvironmentCheckError(f"{self.label}: {message}")

    def call(self, what: str, coro: Any) -> Any:
        return self.calls(what, [coro])[0]

    def calls(self, what: str, coros: list[Any]) -> list[Any]:
        """Run ``coros`` concurrently on the environment loop, each within the timeout."""
        out = []
        for value, cause, _ in self.loop.run([(c, self.timeout) for c in coros]):
            if cause is None:
                out.append(value)
            elif cause.startswith(("timed out", "blocked")):
                raise self.fail(
                    f"{what} {cause} (a synchronous wait inside an async method? hand blocking "
                    "work to asyncio.to_thread)"
                )
            else:
                raise self.fail(
                    f"{what} {cause} (an environment answers whatever the model writes; raise "
                    "only when the episode cannot go on)"
                )
        return out

    def all(self, rows: list[dict[str, Any]]) -> list[Transcript]:
        # close right after start: an episode may end before its first turn (a prompt too long)
        start = self.start(rows[0], "row 0")
        self.call("close(state) right after start", self.env.close(start.state))
        alone = [self.episode(row, f"row {i}") for i, row in enumerate(rows)]
        self.interference(rows, alone[0])
        return alone

    def start(self, row: dict[str, Any], where: str) -> EpisodeStart:
        return self.starts([(row, where)])[0]

    def starts(self, rows: list[tuple[dict[str, Any], str]]) -> list[EpisodeStart]:
        coros = [self.env.start(dict(row), row_prompt(row, self.data)) for row, _ in rows]
        out = self.calls(f"start(row, prompt) on {rows[0][1]}", coros)
        for (_, where), value in zip(rows, out, strict=True):
            why = start_problem(value)
            if why is not None:
                raise self.fail(f"start on {where} {why}")
        return out

    def responds(self, states: list[Any], text: str, where: str) -> list[EnvResponse]:
        message = assistant_message(text)
        coros = [self.env.respond(state, dict(message)) for state in states]
        out = self.calls(f"respond(state, message) {where}", coros)
        for value in out:
            why = response_problem(value, self.declared)
            if why is not None:
                raise self.fail(f"respond {where} {why}")
        return out

    def episode(self, row: dict[str, Any], where: str) -> Transcript:
        t0 = time.perf_counter()
        start = self.start(row, where)
        t = Transcript(row=row, messages=list(start.messages), tools=start.tools)
        for turn, text in enumerate(self.script):
            [response] = self.responds([start.state], text, f"on {where} turn {turn + 1}")
            t.messages += [assistant_message(text), *response.messages]
            t.rewards.update(reward_values(response.rewards)[0])
            t.turns = turn + 1
            if response.done:
                t.done = True
                break
        self.call(f"close(state) on {where}", self.env.close(start.state))
        t.seconds = time.perf_counter() - t0
        return t

    def interference(self, rows: list[dict[str, Any]], first: Transcript) -> None:
        """Row 0's episode beside another must be the one it is alone (when the environment is
        deterministic enough to say: the same alone twice)."""
        again = self.episode(rows[0], "row 0")
        if _answers(again) != _answers(first):
            return  # not deterministic: nothing to compare with
        other = rows[1] if len(rows) > 1 else rows[0]
        a, b = self.starts([(rows[0], "row 0"), (other, "row 1")])
        side = Transcript(row=rows[0], messages=list(a.messages))
        ended = [False, False]
        for turn, text in enumerate(self.script):
            pending = [(k, s) for k, s in enumerate((a, b)) if not ended[k]]
            if not pending:
                break
            where = f"beside another episode, turn {turn + 1}"
            out = self.responds([s.state for _, s in pending], text, where)
            for (k, _), response in zip(pending, out, strict=True):
                ended[k] = response.done
                if k == 0:
                    side.messages += [assistant_message(text), *response.messages]
                    side.rewards.update(reward_values(response.rewards)[0])
        self.calls("close(state)", [self.env.close(a.state), self.env.close(b.state)])
        if _answers(side) != _answers(first):
            raise self.fail(
                "two episodes run concurrently interfere: row 0's episode went otherwise beside "
                f"another one ({_diff(first, side)}); keep an episode's state in "
                "EpisodeStart(state=...), which start, respond and close receive, not on self "
                "(the episodes of a group run concurrently against one environment object)"
            )


def _answers(t: Transcript) -> tuple[str, str]:
    return json.dumps(t.messages, sort_keys=True, default=str), json.dumps(t.rewards)


def _diff(alone: Transcript, side: Transcript) -> str:
    for k, (x, y) in enumerate(zip(alone.messages, side.messages, strict=False)):
        if x != y:
            return f"message {k}: {_short(x)} alone, {_short(y)} beside another"
    if alone.rewards != side.rewards:
        return f"rewards {alone.rewards} alone, {side.rewards} beside another"
    return f"{len(alone.messages)} messages alone, {len(side.messages)} beside another"


def _short(m: Any, limit: int = 80) -> str:
    text = repr(m.get("content") if isinstance(m, dict) else m)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- episodes


class ScriptedGenerator:
    """A policy that writes the script's ``k``-th message at turn ``k`` of every episode (an
    :class:`~rlvr.api.runtime.Generator` for :class:`EpisodeRunner`): its text tokenized,
    then the end-of-turn token. Every live episode of a call is at the same turn, since the
    runner samples each of them once per call."""

    def __init__(self, tokenizer: Any, script: Sequence[str], eos_id: int):
        self.tokenizer, self.script, self.eos_id = tokenizer, list(script), eos_id
        self.turn = 0

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        text = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.eos_id]
        count = len(prompts) * n
        return Generation(
            token_ids=[list(ids) for _ in range(count)],
            texts=[self.tokenizer.decode(ids, skip_special_tokens=True)] * count,
            truncated=[False] * count,
            logprobs=None,
        )

    def sync_weights(self, model: Any) -> None:
        """Nothing to sync: the script is the policy."""

    def close(self) -> None:
        """Nothing held."""


def format_episode(e: Episode, tokenizer: Any, index: int = 0) -> str:
    """An episode as text: its prompt, then each run of tokens marked ``sampled`` (loss mask 1:
    trained) or ``environment`` (loss mask 0: read, not trained), its rewards and counts."""
    lines = [f"--- episode {index} (row {e.prompt_index})"]
    lines.append(f"[prompt: {len(e.prompt_ids)} tokens, not trained]")
    lines.append(_indent(tokenizer.decode(e.prompt_ids)))
    k = 0
    while k < len(e.token_ids):
        flag = e.action_mask[k]
        end = k
        while end < len(e.token_ids) and e.action_mask[end] == flag:
            end += 1
        what = "sampled, loss mask 1: trained" if flag else "environment, loss mask 0: masked"
        lines.append(f"[{what}; {end - k} tokens]")
        lines.append(_indent(tokenizer.decode(e.token_ids[k:end])))
        k = end
    # what the environment said after the last assistant message: nothing samples after it
    tail = e.messages[len(e.messages) - _untokenized(e) :] if e.turns and not e.failed else []
    for m in tail:
        lines.append(f"[environment, {m.get('role')} message after the last turn: no tokens]")
        lines.append(_indent(str(m.get("content"))))
    ending = "done"
    if e.truncated:
        ending = "truncated (by max turns, the token budget or a turn cut short)"
    if e.failed:
        ending = f"failed: {e.failed}"
    sampled = sum(e.action_mask)
    rewards = ", ".join(f"{k}={v:g}" for k, v in sorted(e.rewards.items())) or "none"
    lines.append(
        f"turns: {e.turns}, tool calls: {e.tool_calls}, tokens: {sampled} sampled + "
        f"{len(e.action_mask) - sampled} environment, environment time {e.env_seconds:.3f}s, "
        f"{ending}"
    )
    lines.append(f"environment rewards: {rewards}")
    return "\n".join(lines)


def _untokenized(e: Episode) -> int:
    """How many of the conversation's last messages came after the last assistant message
    (the environment's closing words: recorded, not tokenized)."""
    k = 0
    for m in reversed(e.messages):
        if m.get("role") == "assistant":
            break
        k += 1
    return k


def _indent(text: str) -> str:
    return "\n".join("    " + line if line else "" for line in text.split("\n"))


__all__ = [
    "DEFAULT_ROWS",
    "DEFAULT_SCRIPT",
    "EnvironmentCheckError",
    "ScriptedGenerator",
    "Transcript",
    "assistant_message",
    "check_episodes",
    "format_episode",
]
