"""The ``reward_model`` reward (issue #36 item 2): a sequence-classification model scores
prompt + completion as TRL 1.16 scores with a reward model, in the trainer's process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

import rlvr
import rlvr.plugin
from rlvr.api.host import create_host
from rlvr.cli.main import main
from rlvr.config.schema import CodeOptInError, ConfigError
from rlvr.rewards.scoring import Scorer

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
SAMPLES = [
    rlvr.plugin.Sample("4", prompt="What is 2 + 2? ", row={"answer": "4"}),
    rlvr.plugin.Sample("It is five, I think.", prompt="What is 2 + 2? ", row={"answer": "4"}),
    rlvr.plugin.Sample("four", prompt="templated", row={"prompt": PROMPT}),  # conversational
    rlvr.plugin.Sample("", prompt="Say nothing.", row={}),
    rlvr.plugin.Sample("x" * 40, prompt="Long? ", row={}),
]


@pytest.fixture(scope="module")
def reward_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A tiny random sequence-classification model (one label) with the tiny tokenizer."""
    out = tmp_path_factory.mktemp("rm") / "tiny-rm"
    config = AutoConfig.from_pretrained(tiny_model_dir, num_labels=1)
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def direct_scores(model_dir: Path, samples: list[rlvr.plugin.Sample]) -> list[float]:
    """The model's logits[0, 0] on each text alone: no batching, no padding."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    out = []
    for s in samples:
        prompt = s.row.get("prompt")
        if isinstance(prompt, list):
            messages = [*prompt, {"role": "assistant", "content": s.completion}]
            text = tokenizer.apply_chat_template(messages, tokenize=False)
        else:
            text = s.prompt + s.completion
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            out.append(float(model(**ids).logits[0, 0]))
    return out


def config_of(rewards: list[dict], **opt_ins) -> rlvr.RunConfig:
    return rlvr.load_config({"rewards": rewards}, create_host(), require=("rewards",), **opt_ins)


@pytest.mark.parametrize("batch_size", [16, 2])
def test_scores_are_the_models_logits_on_prompt_plus_completion(reward_model_dir, batch_size):
    params = {"model": str(reward_model_dir), "batch_size": batch_size}
    config = config_of([{"name": "reward_model", "label": "rm", "params": params}])
    with Scorer.for_config(config, create_host(), workers=1) as scorer:
        scores = scorer.score(SAMPLES)
    expected = direct_scores(reward_model_dir, SAMPLES)
    assert len(set(expected)) == len(expected)  # the texts score differently
    assert scores.per_reward["rm"] == pytest.approx(expected, abs=1e-5)
    assert scores.errors["rm"] == 0


def test_it_runs_in_the_scoring_process_not_the_workers(reward_model_dir):
    record = create_host().rewards["reward_model"]
    assert record.in_process and record.batched
    assert record.batch(None) == "call"


def test_a_missing_directory_and_remote_code_are_config_errors(reward_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="no model directory"):
        config_of([{"name": "reward_model", "params": {"model": str(tmp_path / "nope")}}])
    assert config_of([{"name": "reward_model", "params": {"model": "org/rm"}}])  # a hub id
    remote = {"model": str(reward_model_dir), "trust_remote_code": True}
    with pytest.raises(CodeOptInError, match="--trust-remote-code"):
        config_of([{"name": "reward_model", "params": remote}])
    config_of([{"name": "reward_model", "params": remote}], trust_remote_code=True)


def test_a_string_reward_is_a_reward_model_in_python_and_import_trl(
    reward_model_dir, tiny_model_dir, tmp_path
):
    def digits(completions, **kwargs):
        return [float(any(ch.isdigit() for ch in c)) for c in completions]

    raw = {"model": {"name_or_path": str(tiny_model_dir)}, "training": {"max_steps": 1}}
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}]
    trainer = rlvr.Trainer(raw, dataset=rows, rewards=[str(reward_model_dir), digits])
    entries = trainer.config.rewards
    assert [(e.name, e.key) for e in entries] == [
        ("reward_model", "tiny_rm"),
        ("function", "digits"),
    ]
    assert entries[0].params.model == str(reward_model_dir)

    script = tmp_path / "train.py"
    script.write_text(
        "from trl import GRPOConfig, GRPOTrainer\n\n"
        "def digits(completions, **kwargs):\n    return [1.0 for _ in completions]\n\n"
        "if __name__ == '__main__':\n"
        f"    GRPOTrainer(model='m', reward_funcs=[{str(reward_model_dir)!r}, digits],\n"
        "                args=GRPOConfig(output_dir='o', reward_weights=[0.5, 1.0])).train()\n"
    )
    assert main(["import-trl", str(script)]) == 0
    data = __import__("yaml").safe_load((tmp_path / "train.rlvr.yaml").read_text())
    assert data["rewards"][0] == {
        "name": "reward_model",
        "label": "tiny_rm",
        "params": {"model": str(reward_model_dir)},
        "weight": 0.5,
    }


def test_a_training_run_combines_it_with_another_reward(reward_model_dir, tiny_model_dir, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "What is 1 + 1?", "answer": "2"}) + "\n")
    run = tmp_path / "run"
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "chat_template": False},
        "rewards": [
            {
                "name": "reward_model",
                "label": "rm",
                "weight": 0.5,
                "params": {"model": str(reward_model_dir)},
            },
            {
                "name": "length_penalty",
                "params": {"mode": "overlong", "max_length": 6, "buffer": 2},
            },
        ],
        "training": {
            "output_dir": str(run),
            "num_generations": 4,
            "per_device_train_batch_size": 1,
            "max_steps": 1,
            "max_completion_length": 6,
            "reward_workers": 1,
        },
    }
    rlvr.train(config, progress=False)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4
    as_samples = [rlvr.plugin.Sample(s["completion"], prompt=s["prompt"]) for s in samples]
    expected = direct_scores(reward_model_dir, as_samples)
    assert [s["rewards"]["rm"] for s in samples] == pytest.approx(expected, abs=1e-4)
    for s in samples:
        assert s["reward"] == pytest.approx(
            0.5 * s["rewards"]["rm"] + s["rewards"]["length_penalty"]
        )
