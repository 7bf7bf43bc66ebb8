"""rlvr.functional agrees with verl 0.9.1 where both implement the same thing.

tests/verl_reference/verl_0.9.1.json holds inputs and verl's own outputs (losses, gradients
of the losses with respect to the log-probs, clip fractions, approximate KL, advantages), made by
tests/verl_reference/make.py in a scratch venv (verl is not a dependency). Tolerance: 1e-5
relative and 1e-6 absolute (float32; verl's masked means add 1e-8 to their denominators).
Where rlvr deliberately differs (a singleton group in REINFORCE++-baseline), the difference is
tested as documented.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rlvr.functional as F

DATA = json.loads((Path(__file__).parent / "verl_reference" / "verl_0.9.1.json").read_text())
INPUTS = {k: torch.tensor(v) for k, v in DATA["inputs"].items()}


def close(actual, expected):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float32),
        torch.as_tensor(expected, dtype=torch.float32),
        rtol=1e-5,
        atol=1e-6,
    )


def _ours(kind: str, case: dict):
    logp = INPUTS["logp"].clone().requires_grad_()
    old, mask = INPUTS["old_logp"], INPUTS["mask"]
    adv = torch.tensor(case["advantages"])
    low, high = case["eps_low"], case["eps_high"]
    if kind == "gspo":
        per_token, stats = F.policy_loss(
            logp, old, adv, mask, eps_low=low, eps_high=high, level="sequence"
        )
    else:
        per_token, stats = F.cispo_loss(logp, old, adv, mask, eps_low=low, eps_high=high)
    loss = F.aggregate(per_token, mask, case["mode"])
    loss.backward()
    return loss, logp.grad, stats


@pytest.mark.parametrize("kind", ["gspo", "cispo"])
def test_policy_losses_match_verl(kind):
    cases = DATA[kind]
    assert len(cases) == 8  # [N] and [N, T] advantages x 2 modes x 2 clip settings
    clipped = 0
    for case in cases:
        loss, grad, stats = _ours(kind, case)
        close(loss, case["loss"])
        close(grad, case["grad"])
        close(stats["clip_frac"], case["clip_frac"])
        close(stats["approx_kl"], case["approx_kl"])
        clipped += case["clip_frac"] > 0
    assert 0 < clipped < len(cases)  # the inputs exercise both clipped and unclipped tokens


def test_reinforce_pp_matches_verl():
    ref = DATA["reinforce_pp"]
    rewards, mask = torch.tensor(ref["token_rewards"]), torch.tensor(ref["mask"])
    assert (mask[0] == torch.tensor([1, 1, 0, 1, 1, 1, 1])).all()  # a hole to carry across
    for gamma in (1.0, 0.9):
        close(F.reinforce_pp_advantages(rewards, mask, gamma=gamma), ref[f"gamma_{gamma}"])


def test_reinforce_pp_baseline_matches_verl():
    ref = DATA["reinforce_pp_baseline"]
    scores, mask = torch.tensor(ref["scores"]), torch.tensor(ref["mask"])
    groups = ref["groups"]
    ours = F.reinforce_pp_baseline_advantages(scores, torch.tensor(groups["index"]), mask)
    close(ours, groups["advantages"])


def test_reinforce_pp_baseline_singleton_differs_from_verl_as_documented():
    """verl gives a one-completion group the baseline 0 (its advantage is its raw score);
    rlvr gives it advantage 0 before whitening, as group_advantages does. So rlvr equals verl
    fed the same batch with that completion's score set to 0, and differs from verl on the
    batch as it is."""
    ref = DATA["reinforce_pp_baseline"]
    scores, mask = torch.tensor(ref["scores"]), torch.tensor(ref["mask"])
    index = torch.tensor(ref["singleton"]["index"])
    assert scores[5] != 0 and (index == index[5]).sum() == 1
    ours = F.reinforce_pp_baseline_advantages(scores, index, mask)
    close(ours, ref["singleton_zeroed"])
    assert not torch.allclose(ours, torch.tensor(ref["singleton"]["advantages"]), atol=1e-3)
