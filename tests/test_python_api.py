"""The Python API: ``rlvr.Trainer(config, dataset=..., rewards=[fn]).train()`` runs the pipeline
of ``rlvr train`` on an in-memory dataset and plain Python reward functions, from a notebook.

The end-to-end test trains the quickstart from a notebook-style script (cells one after the
other, no ``if __name__ == "__main__":`` guard, the reward function defined in ``__main__``),
run once as a file (``python script.py``) and once without one (``python -c``, which is what a
notebook kernel's ``__main__`` looks like): the reward function must reach the reward worker
processes (it runs in another process than the script's) and the script must run only once.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from datasets import Dataset, DatasetDict

import rlvr
import rlvr.plugin
from rlvr.api.host import create_host
from rlvr.config.schema import ConfigError, RunConfig
from rlvr.rewards.functions import FUNCTION_REWARD

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
DATA = ROOT / "examples" / "quickstart" / "data"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@pytest.fixture(scope="module")
def quickstart_model(tmp_path_factory) -> Path:
    """The quickstart's tiny model, built by examples/quickstart/make_model.py (about 15 s)."""
    where = tmp_path_factory.mktemp("quickstart")
    command = [
        sys.executable,
        str(ROOT / "examples" / "quickstart" / "make_model.py"),
        "--model-dir",
        str(where / "tiny-arith"),
        "--data-dir",
        str(where / "data"),
    ]
    subprocess.run(command, cwd=ROOT, env=_env(), check=True, timeout=300, capture_output=True)
    return where / "tiny-arith"


NOTEBOOK = """
# A notebook's cells, run top to bottom: no `if __name__ == "__main__":` guard.
import json
import os
import re

from datasets import Dataset

import rlvr

OUT = {out!r}
with open(os.path.join(OUT, "top_level_runs"), "a") as f:  # once per process running this
    f.write(f"{{os.getpid()}}\\n")


def rows(name):
    with open(os.path.join({data!r}, name)) as f:
        return [json.loads(line) for line in f]


train_ds = Dataset.from_list(rows("train.jsonl"))
test_ds = Dataset.from_list(rows("test.jsonl"))
ANSWER = re.compile(r"<answer>(.*?)</answer>")


def correctness(prompts, completions, answer, **kwargs):
    with open(os.path.join(OUT, "reward_pids"), "a") as f:  # a line per completion scored
        f.write(f"{{os.getpid()}}\\n" * len(completions))
    found = [ANSWER.search(c) for c in completions]
    return [float(m is not None and m.group(1).strip() == a) for m, a in zip(found, answer)]


trainer = rlvr.Trainer(
    {config!r},
    dataset=train_ds,
    eval_dataset=test_ds,
    rewards=[correctness],
    overrides=[
        "model.name_or_path={model}",
        "training.output_dir=" + os.path.join(OUT, "run"),
        "training.max_steps=3",
        "training.warmup_steps=0",
        "training.eval_steps=3",
        "training.eval_limit=8",
    ],
)
summary = trainer.train(progress=False)
print("SUMMARY " + json.dumps(summary))
"""


@pytest.mark.parametrize("how", ["file", "no file"])
def test_a_notebook_trains_the_quickstart_with_a_python_reward(tmp_path, quickstart_model, how):
    code = NOTEBOOK.format(
        out=str(tmp_path), data=str(DATA), config=str(QUICKSTART), model=quickstart_model
    )
    script = tmp_path / "notebook.py"
    script.write_text(code)
    command = [sys.executable, str(script)] if how == "file" else [sys.executable, "-c", code]
    proc = subprocess.run(
        command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # The script ran once: the reward workers did not run it again.
    top = (tmp_path / "top_level_runs").read_text().split()
    assert len(top) == 1, top
    # The function ran, and in the reward workers: isolation kept, not this process.
    pids = set((tmp_path / "reward_pids").read_text().split())
    assert pids and top[0] not in pids

    line = next(li for li in proc.stdout.splitlines() if li.startswith("SUMMARY "))
    summary = json.loads(line.removeprefix("SUMMARY "))
    run = tmp_path / "run"
    assert summary["steps"] == 3
    assert summary["output_dir"] == str(run)
    assert summary["checkpoint"] == str(run / "checkpoint-3")
    assert set(summary["rewards"]) == {"answer", "format", "correctness", "(total)"}
    assert 0 <= summary["rewards"]["correctness"]["last"] <= 1
    assert [summary["eval"]["first"]["step"], summary["eval"]["last"]["step"]] == [0, 3]
    assert 0 <= summary["eval"]["last"]["pass@1"] <= 1

    metrics = [json.loads(li) for li in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert summary["last"] == steps[-1]
    assert json.loads((run / "run_summary.json").read_text()) == summary  # kept in the run
    for m in steps:  # every call of the function returned a value
        assert m["rewards/correctness/errors"] == 0 and m["rewards/correctness/timeouts"] == 0
        assert 0 <= m["rewards/correctness/mean"] <= 1
    # 128 completions a step; the eval's 8 prompts twice (steps 0 and 3)
    assert len(pids) >= 1 and sum(1 for _ in (tmp_path / "reward_pids").open()) == 3 * 128 + 16
    saved = (run / "config.yaml").read_text()
    assert f"name: {FUNCTION_REWARD}" in saved and "function: __main__:correctness" in saved
    assert "path: null" in saved  # the rows came from memory


# --------------------------------------------------------------------------- argument forms


def accuracy(prompts, completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]


def brevity(prompts, completions, **kwargs):
    return [-len(c) / 100 for c in completions]


ROWS = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "What is 2 + 2?", "answer": "4"}]


@pytest.fixture
def raw(tiny_model_dir, tmp_path) -> dict:
    """A config without data: or rewards: sections (they come from Python)."""
    return {
        "model": {"name_or_path": str(tiny_model_dir)},
        "training": {
            "output_dir": str(tmp_path / "run"),
            "num_generations": 2,
            "max_steps": 1,
            "per_device_train_batch_size": 2,
            "max_completion_length": 4,
        },
    }


def test_config_as_dict_path_or_run_config(raw, tmp_path):
    raw["rewards"] = [{"name": "format"}]
    before = copy.deepcopy(raw)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    loaded = rlvr.load_config(raw, create_host())
    trainers = [
        rlvr.Trainer(config, dataset=ROWS, rewards=[accuracy]) for config in (raw, path, loaded)
    ]
    for trainer in trainers:
        assert isinstance(trainer.config, RunConfig)
        assert [e.key for e in trainer.config.rewards] == ["format", "accuracy"]
        assert trainer.config == trainers[0].config
        assert trainer.output_dir == tmp_path / "run"
    assert raw == before  # the caller's dict is left as it was


def test_overrides_apply(raw):
    trainer = rlvr.Trainer(
        raw, dataset=ROWS, rewards=[accuracy], overrides=["training.seed=7", "rewards[0].weight=2"]
    )
    assert trainer.config.training.seed == 7
    assert trainer.config.rewards[0].weight == 2


def test_rewards_follow_the_configs_own_with_their_settings(raw):
    raw["rewards"] = [{"name": "format"}]
    trainer = rlvr.Trainer(
        raw,
        dataset=ROWS,
        rewards=[
            accuracy,
            {"function": brevity, "label": "short", "weight": 0.5, "kwargs": {"scale": 2}},
        ],
    )
    entries = trainer.config.rewards
    assert [(e.name, e.key, e.weight) for e in entries] == [
        ("format", "format", 1.0),
        (FUNCTION_REWARD, "accuracy", 1.0),
        (FUNCTION_REWARD, "short", 0.5),
    ]
    assert entries[1].params.function == f"{__name__}:accuracy"
    assert (entries[2].params.index, entries[2].params.kwargs) == (1, {"scale": 2})


def test_the_functions_are_called_as_trl_calls_them(raw):
    trainer = rlvr.Trainer(raw, dataset=ROWS, rewards=[accuracy, brevity])
    record = trainer.host.rewards[FUNCTION_REWARD]
    entries = trainer.config.rewards
    sample = rlvr.plugin.Sample("2", prompt="What is 1 + 1?", row=ROWS[0])
    assert [record.factory(e.params)([sample]).values for e in entries] == [[1.0], [-0.01]]


def test_a_dataset_replaces_data_path_and_may_be_a_datasets_dataset(raw, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "file row", "answer": "1"}\n')
    raw["data"] = {"path": str(rows), "prompt_field": "prompt"}
    with pytest.warns(rlvr.plugin.ConfigWarning, match="data.path .* is not used"):
        trainer = rlvr.Trainer(raw, dataset=Dataset.from_list(ROWS), rewards=[accuracy])
    assert trainer.rows == ROWS
    assert trainer.config.data is not None and trainer.config.data.path is None


def test_max_samples_applies_to_the_dataset(raw):
    raw["data"] = {"max_samples": 1}
    trainer = rlvr.Trainer(raw, dataset=ROWS, rewards=[accuracy])
    assert trainer.rows == ROWS[:1]


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        (
            DatasetDict({"train": Dataset.from_list(ROWS)}),
            r"a mapping \(keys 'train'\).*ds\['train'\]",
        ),
        ("rows.jsonl", "must be a datasets.Dataset or a list of dicts, got str"),
        ([ROWS[0], "What is 2 + 2?"], r"dataset\[1\] is a str, not a row"),
        ([], "dataset has no rows"),
    ],
)
def test_a_dataset_that_is_not_rows_is_one_error(raw, dataset, message):
    with pytest.raises(rlvr.RlvrError, match=message):
        rlvr.Trainer(raw, dataset=dataset, rewards=[accuracy])


def test_the_dataset_is_checked_for_the_fields_the_rewards_need(raw):
    raw["rewards"] = [{"name": "answer"}]
    with pytest.raises(ConfigError, match="field 'answer' needed by reward 'answer'"):
        rlvr.Trainer(raw, dataset=[{"prompt": "What is 1 + 1?"}])


def test_without_a_dataset_data_path_is_still_required(raw):
    raw["data"] = {"prompt_field": "question"}
    with pytest.raises(ConfigError, match="data.path: required field is missing"):
        rlvr.Trainer(raw, rewards=[accuracy])


@pytest.mark.parametrize(
    ("rewards", "message"),
    [
        (["answer"], r"rewards\[0\] is the string 'answer': a string is a reward model"),
        ([3], r"rewards\[0\] is int, not a function"),
        ([{"function": accuracy, "wieght": 2}], r"unknown keys \['wieght'\]"),
        ([lambda prompts, completions, **kw: [0.0]], "has no name to log it by"),
    ],
)
def test_bad_rewards_are_one_error(raw, rewards, message):
    with pytest.raises(rlvr.RlvrError, match=message):
        rlvr.Trainer(raw, dataset=ROWS, rewards=rewards)


def test_a_lambda_with_a_label_is_fine(raw):
    fn = lambda prompts, completions, **kw: [0.0] * len(completions)  # noqa: E731
    trainer = rlvr.Trainer(raw, dataset=ROWS, rewards=[{"function": fn, "label": "zero"}])
    assert trainer.config.rewards[0].key == "zero"


def test_two_functions_of_one_name_need_labels(raw):
    with pytest.raises(ConfigError, match="'accuracy' is already used by rewards"):
        rlvr.Trainer(raw, dataset=ROWS, rewards=[accuracy, accuracy])


def _streaming():
    stream = (float(i) for i in range(10**6))  # a generator cannot be pickled

    def streaming(prompts, completions, **kwargs):
        return [next(stream) for _ in completions]

    return streaming


def test_a_function_that_cannot_reach_the_workers_is_an_error_unless_in_process(raw):
    with pytest.raises(rlvr.RlvrError, match="cannot send the reward function.*reward_workers: 0"):
        rlvr.Trainer(raw, dataset=ROWS, rewards=[_streaming()])
    raw["training"]["reward_workers"] = 0  # called in this process: nothing to send
    assert (
        rlvr.Trainer(raw, dataset=ROWS, rewards=[_streaming()]).config.rewards[0].key == "streaming"
    )


def test_the_facade_exports_the_trainer():
    assert "Trainer" in rlvr.__all__ and rlvr.Trainer.__module__ == "rlvr.runs"


# --------------------------------------------------------------------------- console

THIRD_PARTY_BARS = """
import sys
import datasets  # imported by the script first, as a notebook that built its rows does
import rlvr
from rlvr.model.tiny import build_tiny_model, write_gguf

root = sys.argv[1]
write_gguf(build_tiny_model(root + "/model"), root + "/tiny.gguf")
print("--- evaluate", file=sys.stderr, flush=True)
config = {
    "model": {"name_or_path": root + "/tiny.gguf"},
    "data": {"path": root + "/data.jsonl", "chat_template": True},
    "rewards": [{"name": "answer"}],
    "training": {"output_dir": root + "/run", "max_completion_length": 4, "reward_workers": 0},
}
rlvr.evaluate(config, limit=1, split=root + "/data.jsonl")
assert not datasets.is_progress_bar_enabled()
"""


@pytest.mark.parametrize("shown", [False, True])
def test_the_python_api_hides_third_party_progress_bars_as_the_cli_does(tmp_path, shown):
    """#45 item 14: ``rlvr.evaluate`` (and ``train``, ``Trainer``) showed the bars ``rlvr eval``
    hides (GGUF dequantizing, weights loading), also for a library imported before rlvr;
    the libraries' own variables still bring them back."""
    (tmp_path / "data.jsonl").write_text('{"prompt": "What is 1 + 2?", "answer": "3"}\n')
    env = _env() | {"RLVR_GGUF_CACHE": "off"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    env.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    script = THIRD_PARTY_BARS
    if shown:  # the user asked for them
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = "0"
        script = script.replace("assert not datasets", "assert datasets")
        env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    during = done.stderr.split("--- evaluate", 1)[1]
    bars = [b for b in ("de-quantizing GGUF", "Loading weights") if b in during]
    assert bars == (["de-quantizing GGUF", "Loading weights"] if shown else []), during[-2000:]


# --------------------------------------------------------------------------- a loaded config


@pytest.fixture
def loaded(tiny_model_dir, tmp_path) -> RunConfig:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n')
    raw = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "eval_path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "training": {
            "output_dir": str(tmp_path / "run"),
            "max_completion_length": 6,
            "reward_workers": 0,
        },
    }
    return rlvr.load_config(raw, create_host())


def test_validate_applies_overrides_to_a_loaded_config(loaded):
    """#43 item 8: `rlvr.validate(config, overrides=...)` dropped them for a loaded config."""
    config = rlvr.validate(loaded, overrides=["training.seed=7", "rewards[0].weight=2"])
    assert (config.training.seed, config.rewards[0].weight) == (7, 2)
    assert (loaded.training.seed, loaded.rewards[0].weight) == (42, 1)  # the caller's, unchanged
    assert rlvr.validate(loaded) is loaded  # nothing to apply: the same config
    with pytest.raises(ConfigError, match="training.seeed"):
        rlvr.validate(loaded, overrides=["training.seeed=7"])


def test_evaluate_applies_greedy_and_overrides_to_a_loaded_config(loaded, tmp_path):
    """#43 item 8: `rlvr.evaluate(config, greedy=True, overrides=[...])` dropped both for a
    loaded config: it sampled at the training temperature with the config's own settings."""
    assert loaded.training.temperature == 1.0
    summary = rlvr.evaluate(
        loaded,
        greedy=True,
        overrides=["training.max_completion_length=3"],
        limit=1,
        output=tmp_path / "eval",
    )
    assert (summary["temperature"], summary["max_completion_length"]) == (0.0, 3)
    assert loaded.training.max_completion_length == 6  # the caller's, unchanged
