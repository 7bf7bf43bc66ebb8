"""Regenerate ``verl_0.9.1.json``: verl's own outputs on fixed inputs, for test_verl_reference.py.

verl is never a dependency of rlvr. Run this in a scratch venv with torch 2.13 (CPU) and
transformers, plus ``pip install --no-deps verl==0.9.1`` and the few packages importing
``verl.trainer.ppo.core_algos`` needs (``omegaconf tensordict codetiming ray orjson``)::

    /tmp/verlvenv/bin/python tests/verl_reference/make.py

It calls ``verl.trainer.ppo.core_algos.compute_policy_loss_gspo``, ``compute_policy_loss_cispo``,
``compute_reinforce_plus_plus_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage`` on seeded random inputs (with right
padding, a hole in a mask and an empty row) and writes inputs, outputs and the gradients of the
losses with respect to the log-probs as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import verl
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

OUT = Path(__file__).with_name("verl_0.9.1.json")
N, T = 6, 7


def inputs(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 5, 1, 0, 6, 3])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    mask[0, 2] = 0.0  # a hole inside a completion (e.g. tool output)
    old = -torch.rand(N, T, generator=g) * 3.0
    # Mostly small moves, a few large ones, so that both clipped and unclipped tokens occur.
    step = 0.02 * torch.randn(N, T, generator=g)
    step[1, :] += 0.4
    step[4, :3] -= 0.5
    logp = old + step
    adv = torch.randn(N, generator=g)
    token_adv = torch.randn(N, T, generator=g)
    return {"mask": mask, "old_logp": old, "logp": logp, "adv": adv, "token_adv": token_adv}


def policy_case(fn, data, adv, mode: str, low: float, high: float) -> dict:
    logp = data["logp"].clone().requires_grad_()
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=low,
        clip_ratio_low=low,
        clip_ratio_high=high,
        loss_agg_mode=mode,
    )
    loss, metrics = fn(
        old_log_prob=data["old_logp"],
        log_prob=logp,
        advantages=adv,
        response_mask=data["mask"],
        loss_agg_mode=mode,
        config=config,
    )
    loss.backward()
    return {
        "advantages": adv.tolist(),
        "mode": mode,
        "eps_low": low,
        "eps_high": high,
        "loss": float(loss.detach()),
        "grad": logp.grad.tolist(),
        "clip_frac": metrics["actor/pg_clipfrac"],
        "approx_kl": metrics["actor/ppo_kl"],
    }


def main() -> None:
    data = inputs(0)
    seq_adv = data["adv"][:, None].expand(N, T).contiguous()
    out: dict = {
        "verl": verl.__version__,
        "torch": torch.__version__,
        "inputs": {k: v.tolist() for k, v in data.items()},
        "gspo": [],
        "cispo": [],
    }
    for adv in (seq_adv, data["token_adv"]):
        for mode in ("seq-mean-token-mean", "token-mean"):
            for low, high in ((3e-4, 4e-4), (0.2, 0.28)):
                out["gspo"].append(
                    policy_case(core_algos.compute_policy_loss_gspo, data, adv, mode, low, high)
                )
            for low, high in ((0.2, 0.28), (1.0, 4.0)):
                out["cispo"].append(
                    policy_case(core_algos.compute_policy_loss_cispo, data, adv, mode, low, high)
                )

    # REINFORCE++: the score on the last valid token minus a per-token KL-like term.
    g = torch.Generator().manual_seed(1)
    mask = data["mask"].clone()
    mask[3, :2] = 1.0  # no empty row here: every row has a last token
    last = (mask * torch.arange(T)).argmax(dim=1)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.0, 1.0])
    token_rewards = -0.01 * torch.rand(N, T, generator=g) * mask
    token_rewards[torch.arange(N), last] += scores
    out["reinforce_pp"] = {"mask": mask.tolist(), "token_rewards": token_rewards.tolist()}
    for gamma in (1.0, 0.9):
        adv, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            token_level_rewards=token_rewards, response_mask=mask, config=AlgoConfig(gamma=gamma)
        )
        out["reinforce_pp"][f"gamma_{gamma}"] = adv.tolist()

    # REINFORCE++-baseline: scores only (verl sums the token rewards to get them).
    outcome = torch.zeros(N, T)
    outcome[torch.arange(N), last] = scores
    baseline = {"mask": mask.tolist(), "scores": scores.tolist()}
    for name, index in (("groups", [0, 0, 0, 1, 1, 1]), ("singleton", [0, 0, 1, 1, 1, 2])):
        adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
            token_level_rewards=outcome.clone(), response_mask=mask, index=index
        )
        baseline[name] = {"index": index, "advantages": adv.tolist()}
    # The singleton's reward set to 0: verl then treats it as rlvr does (see the test).
    zeroed = outcome.clone()
    zeroed[5] = 0.0
    adv, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_level_rewards=zeroed, response_mask=mask, index=[0, 0, 1, 1, 1, 2]
    )
    baseline["singleton_zeroed"] = adv.tolist()
    out["reinforce_pp_baseline"] = baseline

    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
