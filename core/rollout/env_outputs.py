"""What an environment may return: one validator of its outputs and reward values, used by the
episode runner at run time (a problem fails the episode) and by the conformance check
(``rlvr env check``, ``rlvr.testing.check_environment``: a problem is an error), so that an
environment passes the check exactly when training accepts what it returns.

Each function returns ``None`` when the output is valid, else why it is not (a phrase that
follows the call's name: ``respond <why>``), saying what to return instead.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from typing import Any

from rlvr.api.runtime import REWARD_LIMIT, EnvResponse, EpisodeStart

try:  # a full JSON Schema check of tool parameters where jsonschema is installed
    from jsonschema import SchemaError  # type: ignore[import-untyped]
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - the structural checks below still run
    validator_for = None


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def reward_values(
    rewards: Any, declared: tuple[str, ...] | None = None
) -> tuple[dict[str, float], str | None]:
    """``(rewards as floats, None)``, or ``({}, why they are not rewards)``: a mapping of
    non-empty names to finite numbers (a bool counts, as for a reward function) at most
    :data:`REWARD_LIMIT` in magnitude (a NaN would make every advantage of the step NaN).
    ``declared``: the names the environment declared (``Environment(rewards=...)``), the only
    ones it may return; None: not declared, any name."""
    if not isinstance(rewards, Mapping):
        return {}, f"gave rewards {_shown(rewards)}, not a dict of named values"
    out: dict[str, float] = {}
    for name, value in rewards.items():
        if not isinstance(name, str) or not name:
            return {}, f"gave a reward the name {name!r}; a reward's name is a non-empty string"
        if declared is not None and name not in declared:
            listed = ", ".join(repr(d) for d in declared) or "none"
            return {}, (
                f"gave reward {name!r}, which the environment does not declare (it declares "
                f"{listed}); add {name!r} to what Environment(rewards=...) returns, or stop "
                "returning it"
            )
        number = float(value) if isinstance(value, numbers.Real) else math.nan
        if not (math.isfinite(number) and abs(number) <= REWARD_LIMIT):
            return {}, (
                f"gave reward {name!r} the value {_shown(value)}; a reward is a finite "
                f"number of at most {REWARD_LIMIT:g} in magnitude"
            )
        out[name] = number
    return out, None


def messages_problem(messages: Any) -> str | None:
    """Why ``messages`` are no conversation to append (a list of dicts with a ``role`` and text
    ``content``, JSON-serializable: they are written to ``samples.jsonl``), or None."""
    if not isinstance(messages, list):
        return f"gave messages {_shown(messages)}; messages are a list of dicts"
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            return f"gave message {k} {_shown(m)}; each is a dict with a 'role' and 'content'"
        content = m.get("content")
        if not isinstance(content, str) and not (content is None and m.get("tool_calls")):
            return (
                f"gave message {k} the content {_shown(content)}; the chat template needs "
                "text (json.dumps a structured tool result)"
            )
    try:
        json.dumps(messages)
    except (TypeError, ValueError) as exc:
        return f"gave messages that are not JSON-serializable ({exc}); they go to samples.jsonl"
    return None


def tools_problem(tools: Any) -> str | None:
    """Why ``tools`` are not a list of function schemas the chat template can show, or None."""
    if not isinstance(tools, list):
        return f"gave tools {_shown(tools)}; tools are a list of schemas"
    for k, schema in enumerate(tools):
        fn = schema.get("function") if isinstance(schema, dict) else None
        if not (isinstance(schema, dict) and schema.get("type") == "function" and fn):
            return (
                f"gave tools[{k}] {_shown(schema)}; a tool is "
                '{"type": "function", "function": {"name", "description", "parameters"}} '
                "(rlvr.plugin.tool_schema(fn) writes one)"
            )
        name = fn.get("name")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(name, str) or not name:
            return f"gave tools[{k}] without a function name"
        if not isinstance(params, dict) or params.get("type") != "object":
            return (
                f"gave tool {name!r} the parameters {_shown(params)}; they are a JSON "
                'schema of type "object"'
            )
        if validator_for is not None:
            try:
                validator_for(params).check_schema(params)
            except SchemaError as exc:
                return f"gave tool {name!r} parameters that are no valid JSON schema: {exc.message}"
    return None


def start_problem(out: Any) -> str | None:
    """Why ``start``'s return value cannot begin an episode, or None."""
    if not isinstance(out, EpisodeStart):
        return (
            f"returned {type(out).__name__}, not EpisodeStart; return rlvr.plugin.EpisodeStart(...)"
        )
    if not out.messages:
        return (
            f"returned no messages ({out.messages!r}); the model needs a conversation to "
            "answer (return the prompt it receives, at least)"
        )
    why = messages_problem(out.messages)
    if why is None and out.messages[-1].get("role") == "assistant":
        why = (
            "ended its messages with the assistant's; the model answers next, so end with a "
            "user (or tool) message"
        )
    if why is None and out.tools is not None:
        why = tools_problem(out.tools)
    return why


def response_problem(out: Any, declared: tuple[str, ...] | None = None) -> str | None:
    """Why ``respond``'s return value cannot go on (or end) an episode, or None (its rewards
    by :func:`reward_values` against the ``declared`` names)."""
    if not isinstance(out, EnvResponse):
        return (
            f"returned {type(out).__name__}, not EnvResponse; return rlvr.plugin.EnvResponse(...)"
        )
    if not isinstance(out.done, bool):
        return f"gave done={_shown(out.done)}, not a bool"
    why = messages_problem(out.messages)
    if why is None and not out.done and not out.messages:
        why = (
            "returned no messages and done=False; the model would answer its own message. "
            "Say something, or end the episode (done=True)"
        )
    return why or reward_values(out.rewards, declared)[1]


__all__ = [
    "messages_problem",
    "response_problem",
    "reward_values",
    "start_problem",
    "tools_problem",
]
