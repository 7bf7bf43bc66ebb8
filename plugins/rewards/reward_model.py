"""``reward_model``: a sequence-classification model's score, as TRL's ``reward_funcs=["path"]``.

TRL 1.16 loads a string reward function with ``AutoModelForSequenceClassification`` (one
label) and scores each completion with ``logits[:, 0]`` of prompt + completion: the texts
concatenated for a plain-string dataset, the reward tokenizer's chat template over the prompt
messages plus the completion as an assistant message for a conversational one; tokenized
without special tokens, padded on the right. This reward does exactly that::

    rewards:
      - name: reward_model
        params: {model: ./models/my-reward-model, batch_size: 16}
        weight: 0.5

It is batched and runs **in the scoring process** (the trainer's, on the trainer's device with
``device: auto``), not in the reward workers: one copy of the model, on the GPU, as TRL holds
it, instead of one per worker process on the CPU. So it has no timeout (a forward pass does
not hang) and a crash in it is the trainer's. Its weights are loaded when the run starts.
``model.trust_remote_code`` does not cover it: its own ``trust_remote_code: true`` runs the
reward model's Python files and needs ``--trust-remote-code``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rlvr._builtin import trl_inputs
from rlvr.plugin import Sample
from rlvr.plugins.rewards.params import RewardModelParams


def resolve_device(device: str) -> torch.device:
    """``auto``: the trainer's device (``cuda:LOCAL_RANK`` when there is CUDA, else CPU)."""
    if device != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


class RewardModelReward:
    """Scores a batch of samples with the reward model (a :class:`rlvr.plugin.BatchRewardFn`)."""

    def __init__(self, params: RewardModelParams) -> None:
        self.params = params
        self.device = resolve_device(params.device)
        remote = params.trust_remote_code
        self.tokenizer = AutoTokenizer.from_pretrained(params.model, trust_remote_code=remote)
        if self.tokenizer.pad_token is None:  # as TRL: the model scores the last non-pad token
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(
            params.model, num_labels=1, trust_remote_code=remote
        )
        self.model.config.get_text_config().pad_token_id = self.tokenizer.pad_token_id
        self.model.to(self.device).eval()

    def texts(self, samples: list[Sample]) -> list[str]:
        """The texts the model scores: prompt + completion, as TRL builds them."""
        prompts, completions, _ = trl_inputs(samples, self.params.format)
        out = []
        for prompt, completion in zip(prompts, completions, strict=True):
            if isinstance(prompt, list):  # messages: the reward tokenizer's chat template
                text: Any = self.tokenizer.apply_chat_template(prompt + completion, tokenize=False)
                out.append(str(text))
            else:
                out.append(prompt + completion)
        return out

    @torch.inference_mode()
    def __call__(self, samples: list[Sample]) -> list[float]:
        texts = self.texts(samples)
        size, cut = self.params.batch_size, self.params.max_length
        scores: list[float] = []
        for start in range(0, len(texts), size):
            inputs = self.tokenizer(
                text=texts[start : start + size],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                add_special_tokens=False,
                truncation=cut is not None,
                max_length=cut,
            ).to(self.device)
            scores.extend(self.model(**inputs).logits[:, 0].float().tolist())
        return scores


__all__ = ["RewardModelParams", "RewardModelReward", "resolve_device"]
