"""REINFORCE++ and REINFORCE++-baseline: critic-free, with batch-level advantage whitening.

Both use the shared clipped surrogate, token-mean. They differ in where the KL goes, as in the
paper and OpenRLHF: ``reinforce_pp`` puts ``beta * k1`` into the token rewards and whitens the
returns-to-go over the batch; ``reinforce_pp_baseline`` subtracts the prompt group's mean score,
whitens over the batch, and (when ``beta > 0``) adds the KL to the loss like GRPO.
"""

from __future__ import annotations

from rlvr import functional as F
from rlvr._builtin import kl_shaped_token_rewards
from rlvr.plugin import PolicyGradient


class ReinforcePP(PolicyGradient):
    #: the KL goes into the token rewards, not into the loss.
    kl_in_loss = False

    def advantages(self, batch, rewards, mask, metrics):
        token_rewards = kl_shaped_token_rewards(batch, rewards, mask, self.params, metrics)
        return F.reinforce_pp_advantages(token_rewards, mask, gamma=self.params.gamma), None


class ReinforcePPBaseline(PolicyGradient):
    def advantages(self, batch, rewards, mask, metrics):
        adv = F.reinforce_pp_baseline_advantages(
            rewards, batch.group_ids, mask, scored=batch.scored
        )
        return adv, None
