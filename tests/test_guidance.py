"""``training.guidance``: one completion of each group is the row's own solution.

Runs on test_trainer's tiny model and 16-row arithmetic dataset (answers "2" to "8").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
# test_trainer's fixtures: the tiny model, its dataset, a host, a config builder.
from test_trainer import TRAIN_SECTIONS, run  # noqa: E402
from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

from rlvr.config.schema import ConfigError, load_config  # noqa: E402
from rlvr.data.prompts import DataError  # noqa: E402
from rlvr.outputs.metrics import read_metrics  # noqa: E402

ANSWER = [{"name": "answer"}]


def samples(output: Path) -> list[dict]:
    lines = (output / "samples.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_each_group_has_one_guide_and_metrics_describe_the_samples(make_config, host, tmp_path):
    config = make_config(
        rewards=[{"name": "toy"}],
        max_steps=2,
        log_samples_steps=1,
        guidance={"field": "answer"},
    )
    run(config, host)
    out = tmp_path / "run"
    rows = samples(out)
    metrics = read_metrics(out)
    assert len(metrics) == 2
    for m in metrics:
        step = [r for r in rows if r["step"] == m["step"]]
        groups = {r["group"] for r in step}
        assert len(groups) == 2  # per_device_train_batch_size prompts
        for g in groups:
            group = [r for r in step if r["group"] == g]
            guides = [r for r in group if r.get("guide")]
            assert len(group) == 4 and len(guides) == 1  # num_generations in all
            # The guide is the row's solution, scored by the same reward, ended by eos.
            assert guides[0]["completion"] == guides[0]["row"]["answer"]
            assert guides[0]["num_tokens"] >= 2 and not guides[0]["truncated"]
        sampled = [r["reward"] for r in step if not r.get("guide")]
        guided = [r["reward"] for r in step if r.get("guide")]
        assert m["guide/count"] == 2
        assert m["guide/reward_mean"] == pytest.approx(sum(guided) / 2)
        assert m["reward"] == pytest.approx(sum(sampled) / len(sampled), rel=1e-6)
        assert m["completion_length/max"] <= 12


def test_a_solution_that_does_not_fit_is_not_used(make_config, host, tmp_path):
    """Rows whose solution is longer than max_completion_length are sampled in full."""
    path = tmp_path / "long.jsonl"
    rows = [
        {"prompt": f"What is {a} + 1?", "answer": str(a + 1), "solution": sol}
        for a, sol in [(1, "2"), (2, " ".join(["three"] * 40)), (3, "4"), (4, "five " * 40)]
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = make_config(
        rewards=[{"name": "toy"}],
        data={"path": str(path), "shuffle": False},
        max_steps=2,
        log_samples_steps=1,
        guidance={"field": "solution"},
    )
    run(config, host)
    out = tmp_path / "run"
    seen = {}
    for r in samples(out):
        seen.setdefault((r["step"], r["group"]), []).append(r)
    assert len(seen) == 4
    for group in seen.values():
        short = len(group[0]["row"]["solution"]) < 5
        assert len(group) == 4
        assert sum(bool(r.get("guide")) for r in group) == (1 if short else 0)
    assert [m["guide/count"] for m in read_metrics(out)] == [1, 1]


def test_remove_strips_annotations_from_the_solution(make_config, host, tmp_path):
    path = tmp_path / "annotated.jsonl"
    rows = [
        {"prompt": f"What is {a} * 2?", "answer": f"{a}*2 = <<{a}*2={2 * a}>>{2 * a}\n#### {2 * a}"}
        for a in range(1, 5)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = make_config(
        rewards=ANSWER,
        data={"path": str(path)},
        max_steps=1,
        log_samples_steps=1,
        max_completion_length=24,
        guidance={"field": "answer", "remove": "<<[^>]*>>"},
    )
    run(config, host)
    guides = [r for r in samples(tmp_path / "run") if r.get("guide")]
    assert len(guides) == 2
    for g in guides:
        b = int(g["row"]["answer"].rsplit(" ", 1)[1])
        assert g["completion"] == f"{b // 2}*2 = {b}\n#### {b}"
        assert g["rewards"]["answer"] == 1.0  # the rewards read the cleaned solution
    assert read_metrics(tmp_path / "run")[0]["guide/reward_mean"] == 1.0


def _solution_logprob(model_dir: Path, tiny_model: Path, dataset: Path) -> float:
    """Mean log-probability of each row's answer (then eos) after its chat prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    total = []
    for line in dataset.read_text().splitlines():
        row = json.loads(line)
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": row["prompt"]}], tokenize=False, add_generation_prompt=True
        )
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(row["answer"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids = torch.tensor([p + c])
        with torch.no_grad():
            logp = model(ids).logits[0, :-1].float().log_softmax(-1)
        picked = logp[len(p) - 1 :].gather(1, ids[0, len(p) :, None]).sum()
        total.append(float(picked))
    return sum(total) / len(total)


@pytest.fixture(scope="module")
def big_sums(tmp_path_factory) -> Path:
    """16 sums of five digits: a random model samples one by chance with odds of about
    512**-5, on any device's random stream (with one-digit sums, CUDA's stream hit one)."""
    path = tmp_path_factory.mktemp("big") / "sums.jsonl"
    pairs = [(a, b) for a in (12045, 23156, 34267, 45378) for b in (10203, 20304, 30405, 40506)]
    rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in pairs]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_guidance_teaches_answers_the_samples_never_reach(make_config, host, tiny_model, big_sums):
    """A random model never samples the right five-digit sum, so GRPO on `answer` alone has
    nothing to prefer; with guidance every group holds one right answer and the model learns
    it."""
    dataset = big_sums
    kw = dict(rewards=ANSWER, max_steps=8, learning_rate=3e-3, save_steps=8, temperature=1.0)
    kw["data"] = {"path": str(dataset)}
    plain = make_config(output="plain", **kw)
    guided = make_config(output="guided", guidance={"field": "answer"}, **kw)
    run(plain, host)
    run(guided, host)
    root = Path(plain.training.output_dir).parent
    before = _solution_logprob(tiny_model, tiny_model, dataset)
    after_plain = _solution_logprob(root / "plain" / "checkpoint-8", tiny_model, dataset)
    after_guided = _solution_logprob(root / "guided" / "checkpoint-8", tiny_model, dataset)
    assert all(m["rewards/answer/mean"] == 0 for m in read_metrics(root / "plain"))
    assert after_plain == pytest.approx(before, abs=1e-6)  # all-zero advantages: no update
    assert after_guided > before + 1.5, (before, after_guided)
    assert all(m["guide/reward_mean"] == 1.0 for m in read_metrics(root / "guided"))


def test_guidance_config_errors_say_what_to_change(make_config, host, tmp_path):
    with pytest.raises(ConfigError, match="num_generations >= 2"):
        make_config(num_generations=1, algorithm="rloo", guidance={"field": "answer"})
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        make_config(guidance={"field": "answer", "remove": "<<[^>"})
    with pytest.raises(ConfigError, match="importance_sampling_correction"):
        make_config(
            guidance={"field": "answer"}, algo_params={"importance_sampling_correction": True}
        )


def test_a_missing_solution_field_is_reported_before_the_model_loads(make_config, host):
    config = make_config(rewards=[{"name": "toy"}], guidance={"field": "solution"})
    config.model.name_or_path = "/nonexistent/model"  # loading it would fail differently
    with pytest.raises(DataError, match=r"field 'solution' needed by training.guidance"):
        run(config, host)


def test_rlvr_validate_reports_a_missing_solution_field(make_config, host):
    from rlvr.training.preflight import preflight

    config = make_config(rewards=[{"name": "toy"}], guidance={"field": "solution"})
    problems = dict(preflight(config, host))
    assert "field 'solution' needed by training.guidance" in problems["training.guidance.field"]
    assert "columns: answer, id, prompt" in problems["training.guidance.field"]


def test_guidance_is_part_of_the_schema(host, tiny_model, dataset, tmp_path):
    raw = {
        "model": {"name_or_path": str(tiny_model)},
        "data": {"path": str(dataset)},
        "rewards": [{"name": "format"}],
        "algorithm": {"name": "grpo"},
        "backend": {"name": "hf"},
        "training": {"output_dir": str(tmp_path), "guidance": {"field": "answer", "x": 1}},
    }
    with pytest.raises(ConfigError, match="training.guidance.x"):
        load_config(raw, host, require=TRAIN_SECTIONS)
