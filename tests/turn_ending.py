"""A helper of the environment tests: the tiny test model made to end its turns.

A random model almost never samples its end-of-turn token, so each of its turns runs to the
token limit and its episode ends there, before the environment answers. Pushing the
end-of-turn token's output row along the mean hidden state of a typical prompt makes it end
its turns within a few tokens, so episodes have several turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.config.schema import ModelConfig
from rlvr.model.loading import eos_token_ids, load_policy


def turn_ending_policy(model_dir: Path, prompt: str | list[dict[str, str]]) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``model_dir`` in float32 on the CPU, its end-of-turn token
    pushed along the mean hidden state of ``prompt`` (a user message, or messages) as the chat
    template renders it."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    model, tok = load_policy(
        ModelConfig(name_or_path=str(model_dir)), device=torch.device("cpu"), dtype=torch.float32
    )
    eos = eos_token_ids(model, tok)[0]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with torch.no_grad():
        hidden = model.model(**tok([text], return_tensors="pt")).last_hidden_state[0].mean(0)
        model.lm_head.weight[eos] += 8.0 * hidden / hidden.norm() ** 2
    return model, tok
