"""PPO: token-level GAE advantages from a learned value model, KL to the reference in the reward.

The policy loss is the shared clipped surrogate (:class:`~rlvr.algorithms.base.
PolicyGradient`, token-mean); this module adds the token rewards, GAE, the clipped value loss
and the value model (a copy of the policy's backbone with a scalar head).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from rlvr import functional as F
from rlvr._builtin import kl_shaped_token_rewards, last_token_rewards, python_float
from rlvr.plugin import PolicyGradient, RolloutBatch, RunInfo


class ValueModel(nn.Module):
    """``backbone`` (a transformer returning hidden states) + ``nn.Linear(hidden, 1)``.

    ``forward(input_ids, attention_mask)`` returns float32 values ``[N, L]``, one per input
    position (the value of the state after reading that position). Position ids are derived
    from ``attention_mask`` so left-padded prompts get the same positions as in the policy.
    """

    def __init__(self, backbone: nn.Module, hidden_size: int, *, head_init_std: float = 0.0):
        super().__init__()
        self.backbone = backbone
        try:
            device = next(backbone.parameters()).device
        except StopIteration:
            device = None
        self.head = nn.Linear(hidden_size, 1, device=device, dtype=torch.float32)
        with torch.no_grad():
            if head_init_std > 0:
                self.head.weight.normal_(0.0, head_init_std)
            else:
                self.head.weight.zero_()
            self.head.bias.zero_()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if position_ids is None and attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        )
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).float()

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        enable = getattr(self.backbone, "gradient_checkpointing_enable", None)
        if callable(enable):
            enable(**kwargs)


def policy_backbone(policy: nn.Module) -> nn.Module:
    """The base transformer of a ``*ForCausalLM`` model (without its LM head)."""
    base = getattr(policy, "base_model", None)
    if isinstance(base, nn.Module) and base is not policy:
        return base
    get_decoder = getattr(policy, "get_decoder", None)
    if callable(get_decoder):
        decoder = get_decoder()
        if isinstance(decoder, nn.Module) and decoder is not policy:
            return decoder
    raise TypeError(
        f"cannot find the backbone of {type(policy).__name__} for PPO's value model: expected "
        "a transformers *ForCausalLM model with `base_model` or `get_decoder()`"
    )


def hidden_size_of(policy: nn.Module, backbone: nn.Module) -> int:
    for owner in (backbone, policy):
        config = getattr(owner, "config", None)
        if config is None:
            continue
        if hasattr(config, "get_text_config"):
            config = config.get_text_config()
        size = getattr(config, "hidden_size", None)
        if isinstance(size, int):
            return size
    get_embeddings = getattr(policy, "get_input_embeddings", None)
    embeddings = get_embeddings() if callable(get_embeddings) else None
    if embeddings is not None and hasattr(embeddings, "embedding_dim"):
        return int(embeddings.embedding_dim)
    raise TypeError(f"cannot tell the hidden size of {type(policy).__name__}")


class PPO(PolicyGradient):
    kl_in_loss = False

    def __init__(self, params, run: RunInfo):
        super().__init__(params, run)
        self.value_learning_rate = params.value_learning_rate

    def old_values(self, batch: RolloutBatch) -> torch.Tensor:
        """The value model's values of the completion tokens at generation time."""
        if batch.old_values is None:
            raise ValueError(
                f"{self.params.algorithm} needs batch.old_values (the value model's values of "
                "the completion tokens at generation time); requirements.value_model asks the "
                "trainer for them"
            )
        return batch.old_values

    def advantages(self, batch: RolloutBatch, rewards, mask, metrics):
        p = self.params
        values = self.old_values(batch)
        token_rewards = kl_shaped_token_rewards(batch, rewards, mask, p, metrics)
        adv, returns = F.gae(
            token_rewards,
            values,
            mask,
            gamma=p.gamma,
            lam=p.lam,
            whiten=p.whiten_advantages,
        )
        metrics["values/mean"] = python_float(F.masked_mean(values, mask))
        metrics["returns/mean"] = python_float(F.masked_mean(returns, mask))
        return adv, returns

    def extra_loss(self, batch, values, mask, num_tokens, metrics):
        p = self.params
        if values is None:
            raise ValueError(
                "ppo.loss needs `values`: the value model's outputs on the completion tokens"
            )
        if batch.returns is None or batch.old_values is None:
            raise ValueError("batch has no returns/old_values: call prepare() before loss()")
        m = mask.bool()
        # Zero the padding first so garbage there cannot reach the backward pass.
        v = torch.where(m, values.float(), 0.0)
        v_old = torch.where(m, batch.old_values.float(), 0.0)
        ret = torch.where(m, batch.returns.float(), 0.0)
        v_clip = v_old + (v - v_old).clamp(-p.cliprange_value, p.cliprange_value)
        loss_unclipped = (v - ret).square()
        loss_clipped = (v_clip - ret).square()
        per_token = 0.5 * torch.maximum(loss_unclipped, loss_clipped)
        value_loss = F.aggregate(per_token, m, "token-mean", num_tokens=num_tokens)
        metrics["value_loss"] = python_float(F.masked_mean(per_token.detach(), m))
        metrics["value_clip_frac"] = python_float(F.masked_mean(loss_clipped > loss_unclipped, m))
        metrics["values/pred_mean"] = python_float(F.masked_mean(v.detach(), m))
        return p.vf_coef * value_loss

    def build_value_model(self, policy: Any) -> ValueModel:
        backbone = policy_backbone(policy)
        hidden = hidden_size_of(policy, backbone)
        return ValueModel(
            copy.deepcopy(backbone),
            hidden,
            head_init_std=self.params.value_model.head_init_std,
        )


__all__ = ["PPO", "ValueModel", "hidden_size_of", "last_token_rewards", "policy_backbone"]
