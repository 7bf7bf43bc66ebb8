"""The backend's generator (see :class:`rlvr.plugin.Generator`), imported by its ``LazyFactory``
when a run builds it."""

from __future__ import annotations

from typing import Any

import torch
from rlvr.plugin import Generation, SamplingParams, eos_token_ids

from __MODULE__.params import __CLS__Params


class __CLS__Generator:
    """Samples ``n`` completions per prompt with ``model``'s forward pass, token by token.

    A completion ends after its first end-of-sequence token (kept in ``token_ids``); one that
    reaches ``max_tokens`` without it is ``truncated``. Supports temperature (0: greedy),
    top-k and top-p; ``sampling.seed`` makes a call reproducible.
    """

    def __init__(
        self,
        params: __CLS__Params,
        run: Any,
        model: Any,
        tokenizer: Any,
    ) -> None:
        self.params = params
        self.model = model
        self.tokenizer = tokenizer
        self.eos = set(eos_token_ids(model, tokenizer))
        if not self.eos:
            raise ValueError("the tokenizer and model define no end-of-sequence token")
        pad = tokenizer.pad_token_id
        self.pad = int(pad) if pad is not None else min(self.eos)

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingParams) -> Generation:
        if sampling.min_p > 0 or sampling.repetition_penalty != 1.0:
            raise ValueError("this backend supports neither min_p nor repetition_penalty")
        rows = [list(p) for p in prompts for _ in range(n)]
        device = next(self.model.parameters()).device
        rng = torch.Generator(device=device)
        if sampling.seed is not None:
            rng.manual_seed(sampling.seed)
        else:
            rng.seed()
        size = self.params.chunk_size or max(len(rows), 1)
        token_ids: list[list[int]] = []
        truncated: list[bool] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(rows), size):
                    for ids, cut in self._sample(rows[start : start + size], sampling, rng, device):
                        token_ids.append(ids)
                        truncated.append(cut)
        finally:
            self.model.train(was_training)
        texts = self.tokenizer.batch_decode(
            token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return Generation(token_ids=token_ids, texts=texts, truncated=truncated)

    def _sample(self, rows, sampling, rng, device):
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long, device=device)
        attention = torch.zeros_like(ids)
        for i, row in enumerate(rows):  # left padding: every row ends at the same column
            ids[i, width - len(row) :] = torch.tensor(row, device=device)
            attention[i, width - len(row) :] = 1
        out: list[list[int]] = [[] for _ in rows]
        done = [False] * len(rows)
        for _ in range(sampling.max_tokens):
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            logits = (
                self.model(input_ids=ids, attention_mask=attention, position_ids=positions)
                .logits[:, -1, :]
                .float()
            )
            nxt = self._pick(logits, sampling, rng)
            for i, token in enumerate(nxt.tolist()):
                if not done[i]:
                    out[i].append(token)
                    done[i] = token in self.eos
            if all(done):
                break
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            attention = torch.cat([attention, torch.ones_like(nxt)[:, None]], dim=1)
        return [(tokens, not finished) for tokens, finished in zip(out, done, strict=True)]

    @staticmethod
    def _pick(logits: torch.Tensor, sampling: SamplingParams, rng: torch.Generator) -> torch.Tensor:
        if sampling.temperature == 0:
            return logits.argmax(dim=-1)
        logits = logits / sampling.temperature
        if sampling.top_k > 0:
            kth = logits.topk(min(sampling.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if sampling.top_p < 1.0:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            drop = probs.cumsum(dim=-1) - probs > sampling.top_p  # keeps at least the top one
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=rng).squeeze(-1)

    def sync_weights(self, model: Any) -> None:
        """Sampling uses the training model itself: nothing to copy."""
        self.model = model

    def close(self) -> None:
        self.model = None
        self.tokenizer = None
