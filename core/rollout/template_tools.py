"""Tools and tool calls for a chat template that renders none of them (SmolLM2's plain ChatML).

Such a template drops the ``tools=`` schemas and an assistant message's structured
``tool_calls``, so the model would be offered tools it is never shown, and a worked exchange
(``data.few_shot``) would show a call as an empty turn. When the episodes parse the ``hermes``
format, :func:`for_template` writes what the template leaves out as text, the way Hermes-2-Pro
and Qwen2.5 templates do: the schemas inside ``<tools>`` in the system message with the
instruction to call them in ``<tool_call>`` tags, each structured call as
``<tool_call>{json}</tool_call>`` (exactly what :func:`rlvr.rollout.tools.parse_tool_calls`
reads back), and a tool's answer inside ``<tool_response>``. What a template does render is
left to it: :func:`template_tools` asks the template (one render each) what it shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_PROBE = "rlvr_probe_tool"
_PROBE_SCHEMA = {
    "type": "function",
    "function": {"name": _PROBE, "description": "", "parameters": {"type": "object"}},
}

#: What Qwen2.5's template writes for ``tools=`` (the Hermes convention), before the schemas.
TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
#: ... and after them.
CALL_PROMPT = (
    "</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call>'
)


@dataclass(frozen=True)
class TemplateTools:
    """What a chat template renders of tool calling."""

    #: it shows the ``tools=`` schemas to the model.
    shows_tools: bool
    #: it writes an assistant message's structured ``tool_calls``.
    writes_calls: bool


def template_tools(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> TemplateTools:
    """Ask ``tokenizer``'s chat template what it renders of tool calling: a render with a probe
    tool, and one of a probe call (a template that fails on either renders none of it)."""
    kwargs = dict(template_kwargs or {})
    user = {"role": "user", "content": "x"}
    probe_call = {"type": "function", "function": {"name": _PROBE, "arguments": {}}}
    call = {"role": "assistant", "content": "", "tool_calls": [probe_call]}
    return TemplateTools(
        shows_tools=_renders(tokenizer, [user], {**kwargs, "tools": [_PROBE_SCHEMA]}),
        writes_calls=_renders(tokenizer, [user, call], kwargs),
    )


def _renders(tokenizer: Any, messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> bool:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception:  # a template that cannot take it does not render it
        return False
    return _PROBE in str(text)


def hermes_calls(calls: list[dict[str, Any]]) -> str:
    """``tool_calls`` entries as the model writes them in the hermes format, one per block."""
    blocks = []
    for call in calls:
        function = call.get("function") or {}
        body = {"name": function.get("name", ""), "arguments": function.get("arguments", {})}
        blocks.append(f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(blocks)


def for_template(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    fmt: str,
    renders: TemplateTools,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``messages`` and ``tools`` with what the template ``renders`` not written as text in
    ``fmt`` (only ``hermes`` is written; other formats go to the template unchanged). An
    assistant message whose content already holds its calls (a sampled one) is kept as is."""
    if fmt != "hermes" or (renders.shows_tools and renders.writes_calls):
        return messages, tools
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls and not renders.writes_calls and "<tool_call>" not in str(m.get("content") or ""):
            content = str(m.get("content") or "")
            m = {
                **m,
                "content": f"{content}\n{hermes_calls(calls)}" if content else hermes_calls(calls),
            }
            del m["tool_calls"]
        elif m.get("role") == "tool" and not renders.shows_tools:
            m = {**m, "content": f"<tool_response>\n{m.get('content', '')}\n</tool_response>"}
        out.append(m)
    if not tools or renders.shows_tools:
        return out, tools
    schemas = "".join(f"\n{json.dumps(t, ensure_ascii=False)}" for t in tools)
    block = f"{TOOLS_PROMPT}{schemas}\n{CALL_PROMPT}"
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{block}"}
    else:
        out.insert(0, {"role": "system", "content": block})
    return out, None


__all__ = ["TemplateTools", "for_template", "hermes_calls", "template_tools"]
