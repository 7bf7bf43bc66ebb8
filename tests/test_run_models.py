"""The models a run holds (:mod:`rlvr.training.models`): which reference model an algorithm with a
KL term gets, fresh and on resume, with and without LoRA.

Runs on test_trainer's tiny model (no training: loading only).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

from rlvr.config.schema import requirements  # noqa: E402
from rlvr.parallel import distributed  # noqa: E402
from rlvr.training.models import RunModels, load_run_models, pad_token_id  # noqa: E402

CPU = torch.device("cpu")


def load(config, host, resume_from: Path | None = None) -> RunModels:
    return load_run_models(
        config.model,
        config.training,
        requirements(config, host),
        None,  # GRPO builds no value model
        distributed.current(),
        device=CPU,
        dtype=torch.float32,
        resume_from=resume_from,
    )


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_without_a_kl_term_there_is_no_reference(make_config, host):
    models = load(make_config(algo_params={"beta": 0.0}), host)
    assert models.reference is None
    assert models.value_model is None


def test_full_fine_tuning_gets_a_frozen_copy_of_the_base_as_reference(make_config, host):
    models = load(make_config(algo_params={"beta": 0.04}), host)
    ref = models.reference
    assert ref is not None and ref is not models.policy
    assert same_weights(ref, models.policy)
    assert not any(p.requires_grad for p in ref.parameters())
    assert any(p.requires_grad for p in models.policy.parameters())
    # a copy, not shared storage: training the policy must not move the reference
    with torch.no_grad():
        next(models.policy.parameters()).add_(1.0)
    assert not same_weights(ref, models.policy)


def test_a_resumed_full_run_trains_the_checkpoint_against_the_base(make_config, host, tmp_path):
    """On resume the policy is the checkpoint's weights; the reference stays the base model,
    not a copy of the checkpoint (the KL term measures the distance from where training began)."""
    config = make_config(algo_params={"beta": 0.04})
    fresh = load(config, host)
    with torch.no_grad():
        for p in fresh.policy.parameters():
            p.mul_(0.5)
    saved = tmp_path / "checkpoint-1"
    fresh.policy.save_pretrained(saved)
    fresh.tokenizer.save_pretrained(saved)

    resumed = load(config, host, resume_from=saved)
    assert same_weights(resumed.policy, fresh.policy)
    assert resumed.reference is not None
    assert same_weights(resumed.reference, fresh.reference)
    assert not same_weights(resumed.reference, resumed.policy)


def test_lora_needs_no_second_copy(make_config, host):
    pytest.importorskip("peft")
    models = load(make_config(algo_params={"beta": 0.04}, model={"lora": {"r": 4}}), host)
    assert models.reference is None  # the policy with its adapters off is the base
    assert models.reference_is_base
    trainable = {n for n, p in models.policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


class _Tok:
    def __init__(self, pad=None, eos=None):
        self.pad_token_id, self.eos_token_id = pad, eos


@pytest.mark.parametrize(("pad", "eos", "expected"), [(3, 7, 3), (None, 7, 7), (None, None, 0)])
def test_pad_token_id_falls_back_to_eos_then_zero(pad, eos, expected):
    assert pad_token_id(_Tok(pad, eos)) == expected
