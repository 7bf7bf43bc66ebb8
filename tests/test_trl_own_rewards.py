"""TRL 1.16's OWN reward functions (``trl.rewards``, from the installed ``trl`` package of the
test extra) give through rlvr's ``callable`` reward exactly what TRL's trainer computes: on a
generation batch with real token ids (``completion_ids``: three of them read it), scored in
rlvr's reward workers, and in a real training run."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import rlvr
import rlvr.plugin

if importlib.util.find_spec("trl") is None:
    pytest.skip(
        "TRL's own reward functions need trl (pip install 'rlvr[test]')", allow_module_level=True
    )

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # tests/ in the reward workers too (they get sys.path)


@pytest.fixture
def trl_own(monkeypatch):
    """tests/trl_own.py, imported here only: importing trl sets ``VLLM_LOGGING_LEVEL=ERROR``
    for the whole process (its patch against vLLM's noise), which would silence the warnings
    the vLLM tests check; the variable is put back as it was afterwards."""
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "")
    monkeypatch.delenv("VLLM_LOGGING_LEVEL")
    return importlib.import_module("trl_own")


ROWS = [
    {
        "prompt": [{"role": "user", "content": "What is 6*7?"}],
        "solution": "$42$",
        "answer": "42",
    },
    {"prompt": [{"role": "user", "content": "What is 2+3?"}], "solution": "$5$", "answer": "5"},
]
COMPLETIONS = [
    [
        "<think>\n6 times 7\n</think>\n<answer>42</answer>",
        "the answer is \\boxed{42} the answer is the answer is",
        "<think>no</think>\\boxed{41}",
        "42",
    ],
    [
        "<think>two and three</think>\\boxed{5}",
        "five five five five five five five five",
        "\\boxed{6}",
        "",
    ],
]


def trl_values(fn, prompts, completions, ids, rows, step):
    """TRL 1.16 ``GRPOTrainer._calculate_rewards``'s call, for one function."""

    class State:
        global_step, epoch, max_steps = step, 0.0, 10

    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs = {k: [r[k] for r in rows] for k in keys}
    out = fn(
        prompts=prompts,
        completions=completions,
        completion_ids=ids,
        trainer_state=State(),
        log_extra=lambda *a: None,
        log_metric=lambda *a: None,
        **kwargs,
    )
    return [math.nan if v is None else float(v) for v in out]


def same(a: list[float], b: list[float | None]) -> bool:
    b = [math.nan if v is None else v for v in b]
    pairs = zip(a, b, strict=True)
    return all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y) for x, y in pairs)


def test_trl_own_functions_score_the_same_through_callable(tmp_path, tiny_model_dir, trl_own):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    batch = [(r, c) for r, cs in zip(ROWS, COMPLETIONS, strict=True) for c in cs]
    ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for _, c in batch]
    state = rlvr.plugin.TrainerState(global_step=3, epoch=0.0, max_steps=10)
    samples = [
        rlvr.plugin.Sample(
            completion=c,
            prompt=r["prompt"][-1]["content"],
            row=r,
            num_tokens=len(t),
            completion_ids=tuple(t),
            group=i // 4,
            state=state,
        )
        for i, ((r, c), t) in enumerate(zip(batch, ids, strict=True))
    ]
    entries = "\n".join(
        f"  - {{name: callable, label: {name}, params: {{function: 'trl_own:{name}'}}}}"
        for name in trl_own.FUNCTIONS
    )
    config_file = tmp_path / "c.yaml"
    config_file.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\ndata: {{path: {tmp_path}/x.jsonl}}\n"
        f"rewards:\n{entries}\n"
    )
    host = rlvr.create_host()
    config = rlvr.load_config(config_file, host, allow_code=True, training=False)
    with rlvr.Scorer.for_config(config, host, workers=2) as scorer:
        scores = scorer.score(samples)
    prompts = [r["prompt"] for r, _ in batch]
    completions = [[{"role": "assistant", "content": c}] for _, c in batch]
    rows = [r for r, _ in batch]
    for name, fn in trl_own.FUNCTIONS.items():
        expected = trl_values(fn, prompts, completions, ids, rows, step=3)
        assert not scores.errors.get(name), (name, scores.error_messages.get(name))
        assert same(expected, scores.per_reward[name]), (name, expected, scores.per_reward[name])
    # the batch tells them apart: not a test that passes on constants
    assert len(set(scores.per_reward["soft_overlong"])) > 1
    assert len(set(scores.per_reward["repetition_penalty"])) > 1


@pytest.mark.slow
def test_trl_soft_overlong_punishment_in_training_reads_the_sampled_ids(tmp_path, tiny_model_dir):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"count {i}"}) + "\n" for i in range(8)))
    out = tmp_path / "run"
    config = {
        "model": {"name_or_path": str(tiny_model_dir), "dtype": "float32"},
        "data": {"path": str(data), "chat_template": False},
        "rewards": [{"name": "callable", "params": {"function": "trl_own:soft_overlong"}}],
        "training": {
            "output_dir": str(out),
            "max_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 9,  # inside the punished band: 0 > reward > -1
            "log_samples_steps": 1,
            "reward_workers": 2,
        },
    }
    rlvr.train(config, allow_code=True)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples
    for s in samples:
        # TRL's formula on the completion's token count (max 12, cache 6): the ids it read
        n = s["num_tokens"]
        expected = 0.0 if n <= 6 else (-1.0 if n > 12 else (6 - n) / 6)
        assert s["rewards"]["callable"] == pytest.approx(expected), s
    # a random tiny model runs to the limit: 9 tokens, -0.5 (not the fallback 0, not -1)
    assert any(s["rewards"]["callable"] == pytest.approx(-0.5) for s in samples)
