"""The ``replay`` generator (see :class:`rlvr.plugin.Generator`), imported by its ``LazyFactory``
when a run builds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr.plugin import Generation, SamplingParams


class ReplayGenerator:
    def __init__(self, params: Any, run: Any, model: Any, tokenizer: Any) -> None:
        self.params = params
        self.tokenizer = tokenizer
        self.rows = _read(Path(params.path), params.completion_field)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no end-of-sequence token")
        self.eos = int(eos)
        self.cursor = 0
        self.by_prompt: dict[str, list[str]] = {}
        for row in self.rows:
            prompt = row.get(params.prompt_field)
            if isinstance(prompt, str):
                self.by_prompt.setdefault(prompt, []).append(row[params.completion_field])
        self.prompt_cursor: dict[str, int] = {}

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        texts: list[str] = []
        for ids in prompts:
            texts.extend(self._next(ids, n))
        token_ids, truncated = [], []
        for text in texts:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(ids) < sampling.max_tokens:
                token_ids.append([*ids, self.eos])
                truncated.append(False)
            else:
                token_ids.append(ids[: sampling.max_tokens])
                truncated.append(True)
        decoded = self.tokenizer.batch_decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return Generation(token_ids=token_ids, texts=decoded, truncated=truncated)

    def _next(self, prompt_ids: list[int], n: int) -> list[str]:
        field = self.params.completion_field
        if self.params.match == "order":
            out = [self.rows[(self.cursor + k) % len(self.rows)][field] for k in range(n)]
            self.cursor = (self.cursor + n) % len(self.rows)
            return out
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        key = text if text in self.by_prompt else None
        if key is None:  # the longest stored prompt inside the (templated) prompt text
            inside = [p for p in self.by_prompt if p and p in text]
            key = max(inside, key=len) if inside else None
        if key is None:
            raise KeyError(
                f"replay: no row of {self.params.path!r} has a {self.params.prompt_field!r} "
                f"matching the prompt {text[:120]!r}"
            )
        pool, start = self.by_prompt[key], self.prompt_cursor.get(key, 0)
        self.prompt_cursor[key] = (start + n) % len(pool)
        return [pool[(start + k) % len(pool)] for k in range(n)]

    def sync_weights(self, model: Any) -> None:
        """Nothing to do: replayed completions do not depend on the weights."""

    def close(self) -> None:
        self.tokenizer = None


def _read(path: Path, field: str) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get(field), str):
                raise ValueError(f"{path}:{lineno}: expected an object with a string {field!r}")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no completions")
    return rows
