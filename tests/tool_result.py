"""What scripted policies of the tests read back: the last tool message of a prompt rendered
with the tiny model's ChatML template, which renders no tool messages of its own, so rlvr
writes the result inside ``<tool_response>`` (the hermes convention)."""

from __future__ import annotations

TOOL_TURN = "<|im_start|>tool\n"


def last_tool_result(text: str) -> str | None:
    """The content of the last tool turn of ``text``, unwrapped; None when there is none."""
    if TOOL_TURN not in text:
        return None
    turn = text.rsplit(TOOL_TURN, 1)[1].split("<|im_end|>")[0]
    return turn.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
