"""reasoning-gym as a task source (data.reasoning_gym) and its scorer (the reasoning_gym
reward), against the real package (the optional extra rlvr[reasoning-gym])."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip(
    "reasoning_gym", reason="needs the optional extra rlvr[reasoning-gym] (reasoning-gym)"
)

import rlvr  # noqa: E402
from rlvr.api.host import create_host  # noqa: E402
from rlvr.api.registration import Sample  # noqa: E402
from rlvr.cli.main import main  # noqa: E402
from rlvr.config.schema import ConfigError, DataConfig, ReasoningGymConfig, load_config  # noqa: E402
from rlvr.data import reasoning_gym as rg  # noqa: E402
from rlvr.data.prompts import load_rows  # noqa: E402
from rlvr.evaluation.paths import eval_data  # noqa: E402
from rlvr.plugins.rewards.params import ReasoningGymParams  # noqa: E402
from rlvr.plugins.rewards.reasoning_gym import ReasoningGymReward  # noqa: E402
from rlvr.training.preflight import preflight  # noqa: E402

PRODUCTS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
#: Two one-digit terms: 10 x 10 operands x 2 operators = 200 questions (issue #38: 1,000
#: draws hold 198 of them).
SMALL_SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
AIW = {"task_types": ["siblings"], "task_type_weights": [1.0], "max_entities": 4}


def cfg(task: str = "products", params: dict | None = None, **kw) -> ReasoningGymConfig:
    return ReasoningGymConfig(task=task, params=PRODUCTS if params is None else params, **kw)


def questions(rows) -> set[str]:
    return {rg.normalise(r["question"]) for r in rows}


# --------------------------------------------------------------------------- the split


def test_the_splits_are_disjoint_by_construction_and_deterministic():
    c = cfg(train_size=3000, eval_size=300)
    train, test = rg.make_split(c, "train"), rg.make_split(c, "test")
    assert len(train.rows) == 3000 and len(test.rows) == 300
    assert rg.overlap(train.rows, test.rows) == 0
    assert not questions(train.rows) & questions(test.rows)
    assert all(rg.in_eval_share(r["question"], c.eval_share) for r in test.rows)
    assert not any(rg.in_eval_share(r["question"], c.eval_share) for r in train.rows)
    assert len(questions(test.rows)) == 300  # held-out problems are distinct
    # the products space is small: training repeats questions, as the generator draws them
    assert len(questions(train.rows)) < 3000
    assert rg.make_split(c, "test").rows == test.rows  # same seed, same rows
    # the held-out set does not depend on how much is trained on
    assert rg.make_split(cfg(train_size=50, eval_size=300), "test").rows == test.rows


def test_a_question_keeps_its_side_whatever_the_seed():
    a = rg.make_split(cfg(seed=0, train_size=2000), "train").rows
    b = rg.make_split(cfg(seed=12345, eval_size=300), "test").rows
    assert rg.overlap(a, b) == 0
    # different seeds alone would not do it: the same question turns up under both
    other = rg.make_split(cfg(seed=12345, train_size=2000), "train").rows
    assert questions(a) & questions(other)


def test_rows_carry_what_the_scorer_needs_as_json():
    row = rg.make_split(cfg(eval_size=5, template="Q: {question}\nA:"), "test").rows[0]
    assert json.loads(json.dumps(row)) == row
    assert row["prompt"] == f"Q: {row['question']}\nA:"
    assert row["task"] == "products" and json.loads(row["task_params"]) == PRODUCTS
    meta = json.loads(row["metadata"])
    a, b = (int(x) for x in meta["expression"].split(" * "))
    assert row["answer"] == str(a * b)


def test_a_space_too_small_for_the_eval_size_is_one_clear_error():
    with pytest.raises(rg.ReasoningGymError) as err:
        rg.make_split(cfg("chain_sum", SMALL_SUMS, eval_size=100), "test")
    msg = str(err.value)
    assert "\n" not in msg and "distinct questions in the eval share" in msg
    assert "eval_size" in msg and "space ~" in msg


def test_the_space_estimate_recovers_a_known_size():
    space = rg.task_space("chain_sum", SMALL_SUMS, n=1000)
    assert 190 <= space.distinct <= 200 and space.size is not None
    assert 190 <= space.size <= 215
    assert rg.estimate_space(1000, 1000).size is None  # no repeats: no finite estimate
    assert rg.estimate_space(632, 1000).size == pytest.approx(1000, rel=0.01)


def test_enum_knobs_take_yaml_strings():
    rows = rg.make_split(cfg("aiw", AIW, eval_size=20, train_size=20), "test").rows
    assert all(json.loads(r["metadata"])["task_type"] == "siblings" for r in rows)


@pytest.mark.parametrize(
    ("task", "params", "expected"),
    [
        ("prodcts", PRODUCTS, "has no task 'prodcts'; did you mean 'products'"),
        ("products", {"max_digit": 3}, "has no knob(s) 'max_digit'; its knobs: min_terms"),
        ("products", {"min_digits": 3, "max_digits": 2}, "rejects the knobs"),
    ],
)
def test_bad_task_or_knobs_are_one_line(task, params, expected):
    with pytest.raises(
        rg.ReasoningGymError, match=expected.replace("(", r"\(").replace(")", r"\)")
    ):
        rg.make_split(cfg(task, params, eval_size=5), "test")


# --------------------------------------------------------------------------- config


def test_config_takes_a_task_instead_of_a_path(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"data": {"reasoning_gym": {"task": "products", "params": PRODUCTS}}})
    )
    config = load_config(path, create_host(), require=("data",), training=False)
    assert config.data.reasoning_gym.task == "products"
    path.write_text(
        yaml.safe_dump({"data": {"path": "x.jsonl", "reasoning_gym": {"task": "products"}}})
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, create_host(), require=("data",), training=False)
    lines = [line for line in str(err.value).splitlines() if "reasoning_gym" in line]
    assert len(lines) == 1 and "unset data.path" in lines[0]


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"task": "products", "params": {"seed": 1}}, "seed is set by rlvr"),
        ({"task": "products", "template": "no placeholder"}, "{question} placeholder"),
        ({"task": "products", "eval_share": 1.0}, "less than 1"),
    ],
)
def test_bad_sections_are_refused(section, expected):
    with pytest.raises(ValueError, match=expected.replace("{", r"\{").replace("}", r"\}")):
        DataConfig(reasoning_gym=section)


def test_train_and_eval_read_the_two_splits():
    data = DataConfig(reasoning_gym={"task": "products", "params": PRODUCTS, "train_size": 100})
    train = load_rows(data)
    eval_cfg, split, desc = eval_data(data)
    test = load_rows(eval_cfg, split=split)
    assert (len(train), len(test)) == (100, 500) and split == "test"
    assert desc == "reasoning-gym task 'products' [test]"
    assert rg.overlap(train, test) == 0
    with pytest.raises(rg.ReasoningGymError, match="splits train and test, not 'validation'"):
        load_rows(data, split="validation")


# --------------------------------------------------------------------------- the reward


@pytest.fixture(scope="module")
def product_row() -> dict:
    return rg.make_split(cfg(eval_size=1), "test").rows[0]


def score(row: dict, completion: str, **params) -> float | None:
    reward = ReasoningGymReward(ReasoningGymParams(**params))
    return reward(Sample(prompt=row["prompt"], completion=completion, row=row))


def test_the_reward_scores_with_the_tasks_own_score_answer(product_row):
    gold = product_row["answer"]
    assert score(product_row, f"Let me see. <answer>{gold}</answer>") == 1.0
    assert score(product_row, f"<answer> {gold}.00 </answer>") == 1.0  # score_answer's tolerance
    assert score(product_row, f"<answer>{int(gold) + 1}</answer>") == 0.0
    # partial credit of the task's score_answer: the gold inside a longer answer
    assert 0 < score(product_row, f"<answer>= {gold}</answer>") < 1
    assert score(product_row, "no answer here") == 0.0


def test_strict_and_lenient(product_row):
    gold = product_row["answer"]
    bare = f"The product is {gold}"
    assert score(product_row, bare) == 0.0
    assert score(product_row, bare, lenient=True) == 1.0
    # lenient takes the better of the answer block and the last number
    both = f"<answer>{int(gold) + 1}</answer> no wait, it is {gold}"
    assert score(product_row, both) == 0.0 and score(product_row, both, lenient=True) == 1.0


def test_the_reward_scores_an_enum_task_from_its_row():
    row = rg.make_split(cfg("aiw", AIW, eval_size=3), "test").rows[0]
    assert score(row, f"<answer>{row['answer']}</answer>") == 1.0
    assert score(row, "<answer>-1</answer>") == 0.0


def test_the_reward_is_registered_as_checking_answers():
    record = create_host().rewards["reasoning_gym"]
    assert record.correctness
    assert record.fields(ReasoningGymParams()) == ("task", "answer")
    assert rlvr.reasoning_gym_dataset("products", PRODUCTS) is rlvr.reasoning_gym_dataset(
        "products", dict(PRODUCTS)
    )  # one dataset object per (task, knobs)


# --------------------------------------------------------------------------- rlvr data, runs


def test_rlvr_data_writes_the_same_split(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    section = {"task": "products", "params": PRODUCTS, "train_size": 200, "eval_size": 50}
    config.write_text(yaml.safe_dump({"data": {"reasoning_gym": section}}))
    assert main(["data", str(config), "--out", str(tmp_path / "out"), "--space-draws", "1000"]) == 0
    out = capsys.readouterr().out
    assert "train/test overlap: 0 questions" in out and "task space: 586 distinct in 1000" in out
    read = {
        s: [json.loads(x) for x in (tmp_path / "out" / f"{s}.jsonl").read_text().splitlines()]
        for s in ("train", "test")
    }
    c = ReasoningGymConfig(**section)
    assert read["train"] == rg.make_split(c, "train").rows
    assert read["test"] == rg.make_split(c, "test").rows


def test_a_run_trains_and_evaluates_on_a_task(tmp_path, tiny_model_dir):
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {
            "reasoning_gym": {"task": "products", "params": PRODUCTS, "eval_size": 4},
            "chat_template": False,
        },
        "rewards": [{"name": "reasoning_gym", "params": {"lenient": True}}],
        "training": {
            "output_dir": str(tmp_path / "run"),
            "max_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 4,
            "reward_workers": 0,
            "eval_steps": 1,
            "eval_limit": 2,
        },
    }
    rlvr.train(config, progress=False)
    logged = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert sum("eval/pass@1" in m for m in logged) == 3  # steps 0, 1 and 2, on held-out rows
    summary = rlvr.evaluate(config, limit=4)
    assert summary["num_prompts"] == 4 and summary["data"] == "reasoning-gym task 'products' [test]"
    assert summary["metric"] == "reasoning_gym" and "accuracy" in summary
    samples = [json.loads(x) for x in Path(summary["samples"]).read_text().splitlines()]
    held_out = {r["question"] for r in rg.make_split(cfg(eval_size=4), "test").rows}
    assert {s["row"]["question"] for s in samples} == held_out


def test_validate_reports_a_held_out_split_too_small_before_any_model_loads():
    section = {"task": "chain_sum", "params": SMALL_SUMS, "train_size": 100, "eval_size": 100}
    config = load_config(
        {"data": {"reasoning_gym": section}}, create_host(), require=("data",), training=False
    )
    problems = preflight(config, create_host())
    assert [where for where, _ in problems] == ["data.reasoning_gym"]
    assert "distinct questions in the eval share" in problems[0][1]
    section["eval_size"] = 10
    config = load_config(
        {"data": {"reasoning_gym": section}}, create_host(), require=("data",), training=False
    )
    assert preflight(config, create_host()) == []
