"""`rlvr rewards score`: a JSONL file in, scored rows out, bad rows reported by line."""

from __future__ import annotations

import json
from pathlib import Path

import rlvr
import rlvr.plugin
from rlvr.api.host import create_host
from rlvr.cli.main import main
from rlvr.config.schema import load_config
from rlvr.rewards.score_file import score_file

# Shipped with the repository (tests/faults/ has a conftest too, so no `from conftest import`).
GSM8K_DIR = Path(__file__).resolve().parents[1] / "examples" / "data" / "gsm8k"


def test_score_gsm8k_rows_with_a_bad_line(tmp_path, capsys):
    rows = [json.loads(line) for line in (GSM8K_DIR / "test.jsonl").read_text().splitlines()[:6]]
    lines = []
    for i, row in enumerate(rows):
        gold = row["answer"].split("####")[-1].strip()
        answer = gold if i % 2 == 0 else gold + "1"  # odd rows wrong
        lines.append(
            json.dumps({**row, "completion": f"<think>ok</think><answer>{answer}</answer>"})
        )
    lines.insert(2, "{not json")
    lines.insert(4, json.dumps({"prompt": "no completion here"}))
    src = tmp_path / "rows.jsonl"
    src.write_text("\n".join(lines) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(
        "rewards:\n"
        "  - {name: answer}\n"
        "  - {name: format, weight: 0.5}\n"
        "  - {name: length_penalty, params: {max_length: 100, buffer: 20}}\n"
    )
    out = tmp_path / "scored.jsonl"
    code = main(["rewards", "score", "-c", str(config), "-i", str(src), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == 6  # every good row, in order
    assert [r["rewards"]["answer"] for r in scored] == [1.0, 0.0] * 3
    assert all(r["rewards"]["format"] == 1.0 for r in scored)
    # No token lengths in the rows: the length penalty is "not applicable", not 0.
    assert all(r["rewards"]["length_penalty"] is None for r in scored)
    assert [r["reward"] for r in scored] == [1.5, 0.5] * 3
    assert scored[0]["question"] == rows[0]["question"]  # the row's own fields are kept
    assert "line 3: not valid JSON" in captured.err
    assert "line 5: needs a string `completion` field" in captured.err
    table = captured.out
    assert "answer" in table and "0.5000" in table and "6 rows scored" in table
    assert "2 malformed rows skipped" in table


def test_score_requires_only_rewards(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("rewards: [{name: answr}]\n")
    src = tmp_path / "rows.jsonl"
    src.write_text('{"completion": "x"}\n')
    code = main(["rewards", "score", "-c", str(config), "-i", str(src), "-o", str(tmp_path / "o")])
    assert code == 2
    assert "did you mean 'answer'" in capsys.readouterr().err


def test_rescore_an_eval_samples_file(tmp_path, capsys):
    """`rlvr eval` and `rlvr train` write the dataset row under "row": rescoring their
    samples.jsonl with another reward config reads the row's fields (GSM8K's `answer`)."""
    rows = [json.loads(line) for line in (GSM8K_DIR / "test.jsonl").read_text().splitlines()[:2]]
    golds = [row["answer"].split("####")[-1].strip() for row in rows]
    lines = [
        {"index": 0, "sample": 0, "completion": f"So 2 + 2 = 4.\n#### {golds[0]}", "row": rows[0]},
        {"index": 1, "sample": 0, "completion": "#### 123456", "row": rows[1]},
    ]
    src = tmp_path / "samples.jsonl"
    src.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = tmp_path / "c.yaml"
    config.write_text("rewards:\n  - {name: answer}\n")
    out = tmp_path / "scored.jsonl"
    assert main(["rewards", "score", "-c", str(config), "-i", str(src), "-o", str(out)]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["rewards"]["answer"] for r in scored] == [1.0, 0.0]
    assert all("reward_errors" not in r for r in scored)
    assert scored[0]["row"] == rows[0]  # the line is written back as it came, plus the scores


class WeighedPlugin:
    """An environment that declares two rewards (never run: only its names are read)."""

    @rlvr.plugin.hookimpl
    def rlvr_register_environments(self, register):
        register(
            rlvr.plugin.Environment(
                name="weighed",
                params=rlvr.plugin.Params,
                factory=lambda params, run: None,
                description="declares solved and rank",
                rewards=lambda params: ("solved", "rank"),
            )
        )


def test_rows_of_a_multi_turn_run_keep_their_environment_rewards_weighted(tmp_path):
    """A multi-turn run's samples.jsonl rescored: the environment's rewards join ``rewards``
    and the total with ``environment.reward_weights``, as in training (weight 0: not counted)."""
    host = create_host(plugins=[WeighedPlugin()])
    config = load_config(
        {
            "rewards": [{"name": "format", "weight": 0.5}],
            "environment": {"name": "weighed", "reward_weights": {"solved": 2.0, "rank": 0.0}},
        },
        host,
        require=("rewards",),
        training=False,
    )
    src = tmp_path / "samples.jsonl"
    rows = [
        {"prompt": "p", "completion": "no tags", "env_rewards": {"solved": 1.0, "rank": 1.0}},
        {"prompt": "p", "completion": "none either", "env_rewards": {"rank": 1.0}},
        {"prompt": "q", "completion": "x", "env_rewards": {"solved": "yes"}},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scored.jsonl"
    report = score_file(config, host, src, out, workers=0, progress=False)
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in scored] == [2.0, 0.0]  # format 0 here; rank weighs 0
    assert scored[0]["rewards"] == {"format": 0.0, "solved": 1.0, "rank": 1.0}
    assert report.summary["rank"].mean == 1.0 and report.summary["solved"].none_count == 1
    assert report.bad_rows == ["line 3: `env_rewards` must map names to finite numbers"]


def test_a_trl_function_gets_the_rows_completion_ids_or_the_models_tokens(
    tmp_path, capsys, tiny_model_dir
):
    """#45 item 10: a TRL reward function that reads ``completion_ids`` got None from a file
    (and failed: TRL's soft overlong punishment iterates them). Now: the row's own ids, else
    the config's model's tokens of the text (with the end-of-sequence token when the row says
    it was not truncated, as training passes them)."""
    from transformers import AutoTokenizer

    (tmp_path / "r.py").write_text(
        "def ids_seen(prompts, completions, completion_ids, **kwargs):\n"
        "    return [float(sum(ids)) + len(ids) / 1000 for ids in completion_ids]\n"
    )
    rows = [
        {"prompt": "p", "completion": "whatever", "completion_ids": [5, 6, 7]},
        {"prompt": "p", "completion": "12 + 30 = 42"},
        {"prompt": "q", "completion": "12 + 30 = 42", "truncated": False},
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\n"
        "rewards: [{name: callable, label: ids, params: {function: 'r.py:ids_seen'}}]\n"
    )
    out = tmp_path / "scored.jsonl"
    argv = ["rewards", "score", str(config), "-i", str(src), "-o", str(out), "--allow-code"]
    assert main([*argv, "--workers", "0"]) == 0, capsys.readouterr().err
    scored = [json.loads(line)["rewards"]["ids"] for line in out.read_text().splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tokenizer("12 + 30 = 42", add_special_tokens=False)["input_ids"]
    with_eos = [*text, tokenizer.eos_token_id]
    assert scored == [
        18 + 0.003,
        sum(text) + len(text) / 1000,
        sum(with_eos) + len(with_eos) / 1000,
    ]
    # A row whose ids are not token ids is reported by its line, and the others scored.
    src.write_text(json.dumps({"completion": "x", "completion_ids": "1 2"}) + "\n")
    assert main([*argv, "--workers", "0"]) == 1
    assert "line 1: `completion_ids` must be a list of token ids (ints)" in capsys.readouterr().err
