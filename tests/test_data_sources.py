"""Data sources: the prompts come from the data source plugin ``data.source`` names (``file``,
``datasets``, ``reasoning_gym`` built in, any pip-installed one by name); ``data.path`` and
``data.reasoning_gym`` are shorthands of the first and the last."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
import rlvr.plugin
from rlvr.api.host import create_host
from rlvr.config.schema import ConfigError, load_config
from rlvr.data.prompts import DataError, load_rows
from rlvr.evaluation.paths import eval_data
from rlvr.outputs.metrics import read_metrics
from rlvr.training.preflight import preflight


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sums(lo: int, hi: int) -> list[dict]:
    return [{"prompt": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(lo, hi)]


def _data(section: dict, tmp_path: Path, name: str = "run.yaml"):
    config = tmp_path / name
    config.write_text(json.dumps({"data": section}))
    return load_config(config, create_host(), require=("data",), training=False).data


def test_file_source_reads_what_its_shorthand_reads_relative_to_the_config(tmp_path):
    _write(tmp_path / "rows.jsonl", _sums(1, 6))
    host = create_host()
    short = _data({"path": "rows.jsonl"}, tmp_path)
    long = _data({"source": "file", "params": {"path": "rows.jsonl"}}, tmp_path, "long.yaml")
    assert long.params.path == str(tmp_path / "rows.jsonl")  # against the config's directory
    assert load_rows(long, host) == load_rows(short, host) == _sums(1, 6)
    limited = long.model_copy(update={"max_samples": 2})
    assert load_rows(limited, host) == _sums(1, 3)


def test_file_source_names_a_bad_row_and_the_fix(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "a"}\n{"prompt": \n')
    data = _data({"source": "file", "params": {"path": str(rows)}}, tmp_path)
    with pytest.raises(DataError, match=r"line 2 is not valid JSON .* each line must hold one"):
        load_rows(data, create_host())


def test_datasets_source_passes_load_dataset_arguments_and_reads_the_eval_split(tmp_path):
    train = _write(tmp_path / "a.jsonl", _sums(1, 5))
    test = _write(tmp_path / "b.jsonl", _sums(5, 8))
    params = {"path": "json", "data_files": {"train": str(train), "test": str(test)}}
    data = _data({"source": "datasets", "params": params}, tmp_path)
    host = create_host()
    assert load_rows(data, host) == _sums(1, 5)
    eval_cfg, split, desc = eval_data(data)
    assert (split, desc) == ("test", "data source 'datasets' [test]")
    assert load_rows(eval_cfg, host, split=split) == _sums(5, 8)
    with pytest.raises(DataError, match=r"cannot load 'json', split 'validation'"):
        load_rows(data, host, split="validation")


def test_a_shorthand_and_a_source_together_are_one_error_that_says_what_to_write(tmp_path):
    section = {"path": "rows.jsonl", "source": "file", "params": {"path": "rows.jsonl"}}
    with pytest.raises(ConfigError) as err:
        _data(section, tmp_path)
    (problem,) = err.value.problems
    assert problem[0] == "data"
    assert "data.path is the shorthand of source: file" in problem[1]
    assert "remove data.path, or data.source and data.params" in problem[1]


def test_an_unknown_source_or_a_bad_param_is_reported_at_its_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        _data({"source": "datasts", "params": {"path": "x"}}, tmp_path)
    ((path, message),) = err.value.problems
    assert path == "data.source" and "unknown data source 'datasts'; did you mean" in message
    with pytest.raises(ConfigError) as err:
        _data({"source": "datasets", "params": {"path": "json", "nam": "main"}}, tmp_path)
    assert [p for p, _ in err.value.problems] == ["data.params.nam"]
    with pytest.raises(ConfigError) as err:
        _data(
            {"source": "reasoning_gym", "eval_path": "x.jsonl", "params": {"task": "a"}}, tmp_path
        )
    assert "remove data.eval_path" in err.value.problems[0][1]


class _Broken:
    """A data source whose rows fail as a user's would: an RlvrError naming the fix."""

    @rlvr.plugin.hookimpl
    def rlvr_register_data_sources(self, register):
        def rows(params, split):
            raise rlvr.RlvrError(f"row 3 of {split!r} has no question: add one")

        register(rlvr.plugin.DataSource("broken", rlvr.plugin.Params, rows, "fails on row 3"))


def test_a_sources_error_is_reported_before_anything_loads_with_its_message(tmp_path):
    host = create_host(plugins=[_Broken()])
    config = rlvr.load_config({"data": {"source": "broken"}}, host, require=("data",))
    assert ("data.params", "row 3 of 'train' has no question: add one") in preflight(config, host)


needs_rg = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None, reason="needs rlvr[reasoning-gym]"
)
PRODUCTS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


@needs_rg
def test_reasoning_gym_runs_through_the_data_source_with_held_out_overlap_zero(tmp_path):
    from rlvr.data import reasoning_gym as rg

    task = {"task": "products", "params": PRODUCTS, "train_size": 60, "eval_size": 40}
    host = create_host()
    long = _data({"source": "reasoning_gym", "params": task}, tmp_path)
    short = _data({"reasoning_gym": task}, tmp_path, "short.yaml")
    train = load_rows(long, host)
    eval_cfg, split, _ = eval_data(long)
    test = load_rows(eval_cfg, host, split=split)
    assert (len(train), len(test), split) == (60, 40, "test")
    assert rg.overlap(train, test) == 0
    assert train == load_rows(short, host) and test == load_rows(short, host, split="test")


_PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "rlvr-doubles"
version = "0.1.0"
dependencies = ["rlvr"]

[project.entry-points.rlvr]
doubles = "rlvr_doubles"

[tool.setuptools]
packages = ["rlvr_doubles"]
"""

_INIT = """
from rlvr.plugin import DataSource, Params, hookimpl


class DoublesParams(Params):
    count: int = 8


def doubles(params, split):
    start = 1 if split == "train" else 100
    return [
        {"prompt": f"What is {a} + {a}?", "answer": str(2 * a)}
        for a in range(start, start + params.count)
    ]


@hookimpl
def rlvr_register_data_sources(register):
    register(DataSource("doubles", DoublesParams, doubles, "a + a, generated"))
"""


@pytest.mark.slow  # builds a wheel and a venv: about a minute
def test_a_pip_installed_data_source_is_trained_on_by_name(tmp_path, tiny_model_dir):
    sys.path.insert(0, str(Path(__file__).parent))
    from plugin_venv import build_and_install, make_venv, rlvr

    package = tmp_path / "rlvr-doubles"
    (package / "rlvr_doubles").mkdir(parents=True)
    (package / "pyproject.toml").write_text(_PYPROJECT)
    (package / "rlvr_doubles" / "__init__.py").write_text(_INIT)
    python = make_venv(tmp_path)
    build_and_install(python, package, tmp_path)
    listing = json.loads(rlvr(python, "plugins", "--json"))
    (doubles,) = [p for p in listing["plugins"] if p["dist"] == "rlvr-doubles"]
    assert [(r["kind"], r["name"]) for r in doubles["registers"]] == [("data_source", "doubles")]
    # the docs' conformance test of this package (docs/how-to/write-a-data-source.md)
    check = (
        "from rlvr.testing import check_data_source\n"
        "rows = check_data_source('doubles', params={'count': 20})\n"
        "assert rows['train'][0] == {'prompt': 'What is 1 + 1?', 'answer': '2'}, rows\n"
    )
    subprocess.run([str(python), "-c", check], check=True, timeout=300)

    raw = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"source": "doubles", "params": {"count": 6}, "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "training": {
            "output_dir": str(tmp_path / "run"),
            "max_steps": 3,
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 6,
            "learning_rate": 1e-3,
            "reward_workers": 0,
        },
    }
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(raw))
    assert "OK" in rlvr(python, "validate", config)
    rlvr(python, "train", config)  # exit status 0, or it raises with both outputs
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2, 3]
