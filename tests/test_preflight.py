"""`rlvr validate` and `rlvr train` run the same pre-flight and report every problem at once,
before any weights load; relative paths in a config file resolve against the file's directory."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import yaml

import rlvr
from rlvr.api.host import create_host
from rlvr.cli.main import main
from rlvr.plugin import Environment, Params, hookimpl

HAS_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from rlvr.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _rows(path: Path, **fields: str) -> Path:
    return _write(path, json.dumps(fields) + "\n")


def test_every_preflight_problem_at_once_before_any_weights_load(tmp_path, capsys, monkeypatch):
    _rows(tmp_path / "cfg" / "data.jsonl", prompt="What is 1 + 1?", solution="2")
    config = _write(
        tmp_path / "cfg" / "run.yaml",
        "model: {name_or_path: ./no-such-model}\n"
        "data: {path: data.jsonl, prompt_field: question, eval_path: missing.jsonl}\n"
        "rewards: [{name: answer}]\n"
        "training: {report_to: wandb, output_dir: out}\n",
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    cfg = tmp_path / "cfg"
    assert f"model.name_or_path: model path '{cfg / 'no-such-model'}' does not exist" in err
    assert f"data.eval_path: '{cfg / 'missing.jsonl'}' does not exist" in err
    assert "data.prompt_field: field 'question' needed by the prompt" in err
    assert "(columns: prompt, solution)" in err
    assert "rewards[0]: field 'answer' needed by reward 'answer'" in err
    assert ("training.report_to" in err) is not HAS_WANDB

    # train reports the same problems, and loads no weights and writes nothing first.
    import rlvr.model.loading

    def no_loading(*args, **kwargs):
        raise AssertionError("weights loaded before the pre-flight problems were reported")

    monkeypatch.setattr(rlvr.model.loading, "load_policy", no_loading)
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == err.splitlines()[1:]
    assert not (cfg / "out").exists()


def test_missing_data_file_shows_the_absolute_path(tmp_path, capsys, model_dir):
    config = _write(
        tmp_path / "c.yaml",
        f"model: {{name_or_path: {model_dir}}}\ndata: {{path: nope/train.jsonl}}\n"
        "rewards: [{name: format}]\n",
    )
    assert main(["validate", str(config)]) == 2
    assert f"data.path: '{tmp_path / 'nope' / 'train.jsonl'}' does not exist" in (
        capsys.readouterr().err
    )


def test_relative_paths_resolve_against_the_config_file(tmp_path, capsys, monkeypatch, model_dir):
    _rows(tmp_path / "proj" / "data" / "train.jsonl", prompt="What is 1 + 1?", answer="2")
    config = _write(
        tmp_path / "proj" / "configs" / "run.yaml",
        f"model: {{name_or_path: {model_dir}}}\n"
        "data: {path: ../data/train.jsonl}\n"
        "rewards: [{name: answer}, {name: callable, params: {function: 'mine.py:fn'}}]\n"
        "training: {output_dir: ../outputs/run}\n",
    )
    _write(config.parent / "mine.py", "def fn(completions, **kwargs):\n    return [1.0]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the config's directory
    assert main(["validate", str(config), "--print", "--allow-code"]) == 0
    out = capsys.readouterr().out
    assert f"path: {tmp_path / 'proj' / 'data' / 'train.jsonl'}" in out
    assert f"output_dir: {tmp_path / 'proj' / 'outputs' / 'run'}" in out
    assert f"function: {config.parent / 'mine.py'}:fn" in out  # a plugin's path param too

    # --set paths resolve against the current directory, and say where they came from.
    _rows(elsewhere / "mine.jsonl", prompt="What is 2 + 2?", answer="4")
    args = ["--allow-code", "--set", "data.path=mine.jsonl", "--print"]
    assert main(["validate", str(config), *args]) == 0
    assert f"path: {elsewhere / 'mine.jsonl'}" in capsys.readouterr().out
    assert main(["validate", str(config), "--allow-code", "--set", "data.path=other.jsonl"]) == 2
    err = capsys.readouterr().err
    assert f"'{elsewhere / 'other.jsonl'}' does not exist (from --set data.path=other.jsonl)" in err


def test_a_typo_in_a_local_model_path_is_not_taken_for_a_hub_id(tmp_path, capsys, model_dir):
    """``models/tiny-arithm`` beside a ``models/`` directory: reported at once with the near
    miss, where a hub id would wait on the network first."""
    import shutil

    shutil.copytree(model_dir, tmp_path / "models" / "tiny-arith")
    _rows(tmp_path / "rows.jsonl", prompt="What is 1 + 1?", answer="2")
    config = _write(
        tmp_path / "run.yaml",
        "model: {name_or_path: models/tiny-arithm}\n"
        "data: {path: rows.jsonl}\nrewards: [{name: answer}]\n",
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"model path '{tmp_path / 'models' / 'tiny-arithm'}' does not exist" in err
    assert f"did you mean '{tmp_path / 'models' / 'tiny-arith'}'?" in err
    assert "hub" not in err


# --------------------------------------------------------------------------- validate == train


class _ScoredEnvironment:
    """An environment that scores its episodes (``rewards:`` may then be left out), as an
    environment package's "guess the number" does."""

    @hookimpl
    def rlvr_register_environments(self, register):
        register(
            Environment(
                name="guess",
                params=Params,
                factory=dict,
                description="scores its own episodes",
                rewards=lambda params: ("solved",),
            )
        )


def _no_chat_template(model_dir: Path, tmp_path: Path) -> Path:
    plain = tmp_path / "plain-model"
    shutil.copytree(model_dir, plain)
    (plain / "chat_template.jinja").unlink()
    return plain


#: ``(config change, --set overrides, resume, what train and validate both say)``: each a
#: refusal `rlvr train` made that `rlvr validate` did not (#45 item 4).
REFUSALS = {
    "eval-without-a-judge": (
        {"rewards": None, "environment": {"name": "guess"}},
        ["training.eval_steps=5"],
        False,
        "evaluation needs at least one reward in the config's `rewards:`",
    ),
    "eval-data-without-the-rewards-field": (
        {"data": {"eval_path": "eval.jsonl"}},
        ["training.eval_steps=5"],
        False,
        "field 'answer' needed by reward 'answer'",
    ),
    "output-dir-holds-a-run": (
        {"training": {"output_dir": "ran"}},
        [],
        False,
        "already holds a run (checkpoint-3); pass --resume to continue it",
    ),
    "output-dir-holds-a-users-config": (
        {"training": {"output_dir": "mine"}},
        [],
        False,
        "holds config.yaml, which rlvr did not create",
    ),
    "resume-with-nothing-to-resume": (
        {"training": {"output_dir": "empty"}},
        [],
        True,
        "--resume: no complete checkpoint in",
    ),
    "chat-template-the-tokenizer-lacks": (
        {"data": {"chat_template": True}, "model": "plain"},
        [],
        False,
        "data.chat_template: is true but the tokenizer has no chat template",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_validate_refuses_what_train_refuses_with_the_same_message(case, tmp_path, model_dir):
    change, overrides, resume, expected = REFUSALS[case]
    _rows(tmp_path / "rows.jsonl", prompt="What is 1 + 1?", answer="2")
    _rows(tmp_path / "eval.jsonl", prompt="What is 2 + 2?", solution="4")
    (tmp_path / "ran" / "checkpoint-3").mkdir(parents=True)
    (tmp_path / "ran" / "checkpoint-3" / "COMPLETE").write_text("")
    _write(tmp_path / "mine" / "config.yaml", "# the user's own\n")
    (tmp_path / "empty").mkdir()
    model = _no_chat_template(model_dir, tmp_path) if change.get("model") else model_dir
    data = {
        "model": {"name_or_path": str(model)},
        "data": {"path": "rows.jsonl", **change.get("data", {})},
        "rewards": [{"name": "answer"}],
        "training": {"output_dir": "out", **change.get("training", {})},
    }
    if "environment" in change:
        data["environment"] = change["environment"]
        del data["rewards"]
    config = _write(tmp_path / "run.yaml", yaml.safe_dump(data))
    host = create_host(plugins=[_ScoredEnvironment()])

    said = []
    for command in (rlvr.train, rlvr.validate):
        with pytest.raises(rlvr.RlvrError) as info:
            command(config, overrides=overrides, resume=resume, host=host)
        said.append(str(info.value))
    trained, validated = said
    assert expected in trained, trained
    assert validated == trained


def test_validate_shows_the_warnings_train_shows(tmp_path, model_dir, capsys, monkeypatch):
    """A TRL-style config (plain-string prompts, data.chat_template unset) warned only when
    train built its prompts; and `rlvr eval`'s "evaluating on the TRAINING data" only in
    train. Both commands now show both, each once."""
    _rows(tmp_path / "rows.jsonl", prompt="What is 1 + 1?", answer="2")
    config = _write(
        tmp_path / "run.yaml",
        yaml.safe_dump(
            {
                "model": {"name_or_path": str(model_dir)},
                "data": {"path": "rows.jsonl"},
                "rewards": [{"name": "answer"}],
                "training": {
                    "output_dir": "out",
                    "max_steps": 1,
                    "eval_steps": 1,
                    "per_device_train_batch_size": 1,
                    "num_generations": 2,
                    "max_completion_length": 4,
                    "reward_workers": 0,
                },
            }
        ),
    )
    expected = ("warning: data.chat_template is unset", "evaluating on the TRAINING data")
    assert main(["validate", str(config)]) == 0
    err = capsys.readouterr().err
    assert all(err.count(w) == 1 for w in expected), err
    assert main(["train", str(config)]) == 0
    err = capsys.readouterr().err
    assert all(err.count(w) == 1 for w in expected), err
