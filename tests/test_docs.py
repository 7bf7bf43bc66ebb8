"""The docs site says what the code does: its generated reference pages list every config key,
every built-in plugin's params and every command; the metrics page names every metric a run
writes; and the site builds with warnings as errors (broken links fail).

The reference pages are rendered by ``docs/_ext/rlvr_reference.py`` (plain Python, imported here
without Sphinx). Each test walks the code on its own (the pydantic models, the plugin host, the
argument parser, a real training run) and compares what it finds with the rendered Markdown.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pydantic import AliasChoices, BaseModel

import rlvr
from rlvr.api.host import create_host
from rlvr.api.registration import Params
from rlvr.cli.parser import build_parser
from rlvr.compat.trl.keys import TRL_KEYS
from rlvr.config.schema import RunConfig, validate
from rlvr.testing import check_algorithm

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT / "tests"))
import rlvr_reference  # noqa: E402
import test_quickstart  # noqa: E402  (the figures it asserts)

# --------------------------------------------------------------------------- helpers


def models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in getattr(annotation, "__args__", ()) for m in models_in(a)]


def listish(annotation) -> bool:
    origin = getattr(annotation, "__origin__", None)
    return origin in (list, tuple) or any(
        listish(a) for a in getattr(annotation, "__args__", ()) if origin is not None
    )


def accepted_keys(model: type[BaseModel], prefix: str, skip=lambda m: False) -> set[str]:
    """Every dotted key ``model`` accepts, nested models included (``[]`` for list items)."""
    keys = set()
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        keys.add(key)
        for sub in models_in(info.annotation):
            if not skip(sub):
                keys |= accepted_keys(sub, f"{key}[]." if listish(info.annotation) else f"{key}.")
    return keys


def tables_by_heading(markdown: str, level: str) -> dict[str, list[str]]:
    """``{heading: [first cell of every table row below it]}`` for headings of ``level``
    (``##``), the cells with their backticks and escapes removed."""
    out: dict[str, list[str]] = {}
    current = None
    for line in markdown.splitlines():
        if line.startswith(level + " "):
            current = line[len(level) + 1 :].strip().strip("`")
            out[current] = []
        elif current is not None and line.startswith("| `"):
            first = line[2:].split(" | ")[0]
            out[current].append(first.strip("`").replace("\\|", "|"))
    return out


# --------------------------------------------------------------------------- the config


def test_config_reference_lists_exactly_the_keys_the_models_accept():
    page = rlvr_reference.render_config()
    tables = tables_by_heading(page.split("## TRL keys")[0], "##")
    listed = set(tables.pop("The sections"))
    for heading, keys in tables.items():
        listed |= {f"{heading}.{k}" for k in keys}
    accepted = accepted_keys(RunConfig, "", skip=lambda m: issubclass(m, Params))
    assert listed == accepted
    # ... and these are keys a config really takes: each nested section is reachable.
    assert {"model.lora.r", "training.guidance.field", "rewards[].on_error"} <= listed


def test_config_reference_shows_defaults_and_descriptions():
    rows = {f"{t.path}.{r.key}": r for t in rlvr_reference.config_tables() for r in t.rows}
    assert rows["training.learning_rate"].default == "1.0e-06"
    assert rows["model.name_or_path"].default == "required"
    assert rows["training.max_steps"].type == "int"
    assert rows["model.lora.r"].type == "int, >= 1"
    missing = sorted(key for key, row in rows.items() if not row.description)
    assert missing == [], f"config keys without a description in the model: {missing}"


def test_generated_pages_show_no_raw_sphinx_roles():
    """#45 item 17: config.html printed ``:mod:`rlvr.data.reasoning_gym``` as written (a
    docstring's Sphinx role in Markdown); it is a code span of its target now."""
    assert rlvr_reference.prose("data (:mod:`rlvr.data.x`, :func:`~rlvr.train`)") == (
        "data (`rlvr.data.x`, `rlvr.train`)"
    )
    for name in ("config", "plugins", "cli"):
        page = rlvr_reference.RENDERERS[name]()
        assert not rlvr_reference.SPHINX_ROLE.search(page), name
    assert "(`rlvr.data.reasoning_gym`)" in rlvr_reference.render_config()


def test_trl_keys_section_lists_what_training_takes_from_trl():
    section = rlvr_reference.render_config().split("## TRL keys")[1]
    for key in TRL_KEYS:
        assert f"`{key}`" in section


# --------------------------------------------------------------------------- plugins


def test_plugin_reference_covers_every_registered_plugin_and_param():
    host = create_host()
    page = rlvr_reference.render_plugins()
    # by kind: a reward and an environment may share a name (reasoning_gym)
    titles = {"Rewards": "reward", "Algorithms": "algorithm", "Backends": "backend"}
    titles |= {"Environments": "environment", "Callbacks": "callback"}
    titles |= {"Data sources": "data_source"}
    by_kind = {}
    for part in page.split("\n## ")[1:]:
        by_kind[titles[part.splitlines()[0].strip()]] = tables_by_heading(part, "###")
    seen = 0
    for kind, records in host.records.items():
        sections = by_kind.get(kind, {})
        for name, record in records.items():
            if record.dist != "rlvr":
                continue
            seen += 1
            assert name in sections, f"{kind} {name!r} is not on the plugin reference"
            assert set(sections[name]) == accepted_keys(record.params, ""), name
            for field_name, info in record.params.model_fields.items():
                alias = info.validation_alias
                if isinstance(alias, AliasChoices):  # TRL's names are accepted too: say so
                    for other in alias.choices:
                        if other != field_name:
                            assert f"`{other}`" in page, f"{name}.{field_name}: alias {other}"
    assert seen >= 26  # 7 rewards, 10 algorithms, 2 backends, 4 loggers, 3 data sources


def test_plugin_reference_example_validates():
    page = (DOCS / "reference" / "plugins.md").read_text(encoding="utf-8")
    snippet = re.search(r"```yaml\n(.*?)```", page, re.S)
    assert snippet is not None
    config = validate(yaml.safe_load(snippet.group(1)), create_host())
    assert config.algorithm is not None and config.algorithm.name == "dapo"


# --------------------------------------------------------------------------- the command line


def parser_commands(parser: argparse.ArgumentParser, path: str) -> dict[str, set[str]]:
    """``{"rlvr rewards score": {"--config", "-c", ...}}`` for every command and subcommand."""
    out = {path: set()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(parser_commands(sub, f"{path} {name}"))
        elif not isinstance(action, argparse._HelpAction):
            out[path] |= set(action.option_strings) or {str(action.metavar or action.dest)}
    return out


def test_cli_reference_covers_every_command_and_option():
    page = rlvr_reference.render_cli()
    expected = parser_commands(build_parser(), "rlvr")
    assert {"rlvr train", "rlvr rewards score", "rlvr new plugin"} <= set(expected)
    headings = {level: tables_by_heading(page, level) for level in ("##", "###", "####")}
    listed: dict[str, set[str]] = {}
    for command, cells in {k: v for h in headings.values() for k, v in h.items()}.items():
        # "--config, -c CONFIG" names --config and -c; a positional is shown by its name.
        listed[command] = {token for cell in cells for token in re.split(r"[ ,]+", cell)}
    assert set(listed) == set(expected)
    for command, options in expected.items():
        assert options <= listed[command], f"{command}: {sorted(options - listed[command])}"


# --------------------------------------------------------------------------- metrics


def documented_metrics() -> dict[str, list[str]]:
    """The metric names in ``docs/reference/metrics.md``, by section."""
    page = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    return {
        heading: names
        for heading, names in tables_by_heading(page, "##").items()
        if names and heading != "Renamed metrics"
    }


def pattern(name: str) -> re.Pattern[str]:
    """A documented name as a regex: ``<label>``, ``<algorithm>`` and ``<k>`` are placeholders."""
    parts = re.split(r"(<\w+>)", name)
    return re.compile("".join("[^/]+" if p.startswith("<") else re.escape(p) for p in parts))


def matches(key: str, names: list[str]) -> bool:
    return any(pattern(n).fullmatch(key) for n in names)


#: Documented metrics this test's run cannot write, and what would.
NOT_IN_THE_RUN = {
    "value_grad_norm": "a value model (ppo, vapo)",
    "sampler/logp_gap_mean": "a backend that returns log-probabilities (vllm)",
    "sampler/logp_gap_max": "a backend that returns log-probabilities (vllm)",
    "resumed_from": "a run continued with --resume",
    # written by every asynchronous run: tests/test_async_rollouts.py
    "staleness": "an asynchronous run (training.max_staleness)",
    "wait/trainer": "an asynchronous run (training.max_staleness)",
    "wait/generator": "an asynchronous run (training.max_staleness)",
    # written by a run on vLLM servers: tests/test_vllm_servers.py
    "server/queue_time": "vllm in server mode",
    # written by the vllm backend: tests/test_vllm_servers.py, tests/test_vllm_multiturn.py
    "prefix_cache/hit_frac": "the vllm backend",
}


#: a TRL-style reward that logs a metric (``rewards/<label>/metric/<name>``)
LOGS_A_METRIC = f"{Path(__file__).parent / 'trl_rewards.py'}:logs_a_metric"


@pytest.fixture(scope="module")
def run_keys(tmp_path_factory) -> set[str]:
    """Every key a real run writes to metrics.jsonl: grpo with a KL term, guidance, three
    rewards (one of them ``format``, one logging a metric), in-training evaluation with two
    samples per prompt and the phase profile."""
    root = tmp_path_factory.mktemp("metrics-run")
    model = rlvr.build_tiny_model(root / "model")
    rows = [
        {"prompt": f"What is {a} + {b}?", "answer": str(a + b)}
        for a in range(1, 5)
        for b in range(1, 5)
    ]
    (root / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = {
        "model": {"name_or_path": str(model)},
        "data": {"path": str(root / "data.jsonl")},
        "rewards": [
            {"name": "answer"},
            {"name": "format"},
            {"name": "callable", "label": "logs", "params": {"function": LOGS_A_METRIC}},
        ],
        "algorithm": {"name": "grpo", "params": {"beta": 0.04}},
        "training": {
            "output_dir": str(root / "run"),
            "max_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 8,
            "reward_workers": 0,
            "eval_steps": 2,
            "eval_limit": 4,
            "eval_sampling": "train",
            "eval_num_generations": 2,
            "guidance": {"field": "answer"},
            "profile_phases": True,
        },
    }
    rlvr.train(config, progress=False, allow_code=True)
    return {key for line in rlvr.read_metrics(root / "run") for key in line}


def test_every_metric_a_run_writes_is_documented(run_keys):
    documented = [n for names in documented_metrics().values() for n in names]
    undocumented = sorted(k for k in run_keys if not matches(k, documented))
    assert undocumented == []


def test_every_documented_run_metric_is_written(run_keys):
    sections = documented_metrics()
    assert set(NOT_IN_THE_RUN) <= set(sections["Core metrics"])
    for heading in ("Core metrics", "Timing", "Rewards", "Evaluation"):
        for name in sections[heading]:
            if name in NOT_IN_THE_RUN:
                assert name not in run_keys  # else it belongs to the run's checks
                continue
            assert any(pattern(name).fullmatch(k) for k in run_keys), f"{name} was not written"


def test_algorithm_metrics_are_documented_both_ways():
    documented = [
        n.removeprefix("algo/<algorithm>/") for n in documented_metrics()["Algorithm metrics"]
    ]
    host = create_host()
    reported: set[str] = set()
    for name, record in host.algorithms.items():
        if record.dist != "rlvr":
            continue
        keys = set(check_algorithm(record, host=host))
        assert sorted(k for k in keys if k not in documented) == [], name
        reported |= keys
    # The one key no default reports: the sampler correction's weights.
    reported |= set(check_algorithm("grpo", {"importance_sampling_correction": True}, host=host))
    assert sorted(set(documented) - reported) == []


# --------------------------------------------------------------------------- the README

README = (ROOT / "README.md").read_text(encoding="utf-8")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown page's headings (GitHub's and MyST's slugs) and its explicit
    ``(label)=`` targets."""
    anchors = set(re.findall(r"^\(([\w-]+)\)=$", markdown, re.M))
    fence = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


# --------------------------------------------------------------------------- concept pages

ARCHITECTURE = DOCS / "concepts" / "architecture.md"


def resolve_dotted(name: str) -> object:
    """``rlvr.a.b.Class.attr``: the longest importable module prefix, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: a name the page invents
        return obj
    raise ImportError(name)


def test_architecture_page_names_only_modules_and_classes_that_exist():
    """#43 item 8: the page named ``Rollouts.run`` (it is ``RolloutRunner.run``) and three
    plugin families (there are six). Every dotted ``rlvr.x.y`` name on it resolves, every
    ``Class.method`` of its data-flow diagram is an attribute of a class of the modules it
    names (or of ``rlvr``), every ``file.py`` of its layers table is a module of that row's
    package (of one of the two, in a row of two), and its plugin families are the kinds rlvr
    registers and the folders of plugins/."""
    page = ARCHITECTURE.read_text(encoding="utf-8")
    dotted = set(re.findall(r"\brlvr(?:\.[A-Za-z_]\w*)+", page))
    assert len(dotted) > 30
    for name in sorted(dotted):
        try:
            resolve_dotted(name)
        except (ImportError, AttributeError):
            pytest.fail(f"architecture.md names {name}, which does not exist")
    flow = page.split("## The data flow of one step")[1].split("\n## ")[0]
    diagram = flow.split("```text")[1].split("```")[0]
    prefixes = {".".join(n.split(".")[:i]) for n in dotted for i in range(2, n.count(".") + 2)}
    modules = [rlvr, *(m for n in prefixes if isinstance(m := resolve_dotted(n), type(rlvr)))]
    methods = set(re.findall(r"(?<![\w.])([A-Z]\w+)\.([a-z_]\w*)\b", diagram))
    assert ("Trainer", "train_step") in methods and len(methods) >= 8
    for cls_name, attr in sorted(methods):
        owners = [getattr(m, cls_name) for m in modules if hasattr(m, cls_name)]
        assert owners, f"architecture.md's diagram names {cls_name}, found in no module it names"
        assert any(hasattr(o, attr) for o in owners), f"{cls_name} has no {attr}"
    for line in re.findall(r"^\| `rlvr\.\w+`.*$", page, re.M):
        row = line.split("|")[1].strip()  # one package, or two side by side (a · b)
        packages = [ROOT / "core" / name for name in re.findall(r"`rlvr\.(\w+)`", row)]
        for file in re.findall(r"`([\w/]+\.py)`", line):  # trl/keys.py: in a subpackage
            assert any((package / file).is_file() for package in packages), f"{row} has no {file}"
    families = page.split("## The plugin families")[1]
    kinds = set(create_host().records)  # reward, ..., callback, data_source
    folders = {p.name for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").is_file()}
    assert folders == {"data" if kind == "data_source" else f"{kind}s" for kind in kinds}
    first = families.split("\n\n")[1]
    named = set(re.findall(r"`(\w+)`", first))
    assert folders <= named, f"the plugin families sentence lacks {folders - named}"
    numbers = ["one", "two", "three", "four", "five", "six"]
    assert f" {numbers[len(folders) - 1]} families" in first


def test_readme_is_a_landing_page():
    assert len(README.splitlines()) <= 250


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+\.md)(?:#([^)]+))?\)", README)
    assert len(links) > 20
    for target, anchor in links:
        path = ROOT / target
        assert path.is_file(), target
        if anchor:
            assert anchor in heading_anchors(path.read_text(encoding="utf-8")), f"{target}#{anchor}"


def test_readme_lists_every_builtin_plugin():
    section = README.split("## Built-in plugins")[1].split("\n## ")[0]
    host = create_host()
    for kind, records in host.records.items():
        for name, record in records.items():
            if record.dist == "rlvr":
                assert f"`{name}`" in section, f"the README does not list {kind} {name!r}"


def test_readme_config_validates():
    section = README.split("## A config that composes rewards")[1]
    snippet = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert snippet is not None
    assert len(snippet.group(1).splitlines()) <= 22
    raw = yaml.safe_load(snippet.group(1))
    config = validate(raw, create_host(), require=("model", "data", "rewards"))
    assert [r.key for r in config.rewards] == ["answer", "format", "overlong"]
    assert (ROOT / raw["data"]["path"]).is_file()  # relative to the repository root


def test_the_quickstart_command_is_the_one_the_quickstart_test_runs():
    """#45 item 11: with torch's default threads the quickstart ran at 3.7 s a step on a busy
    CPU, 0.15 s with OMP_NUM_THREADS=1; the command people copy sets it, and the slow test
    trains with the same environment."""
    assert test_quickstart.README_COMMAND.startswith(
        " ".join(f"{k}={v}" for k, v in test_quickstart.README_ENV.items())
    )
    pages = [README, *(DOCS / "getting-started" / n for n in ("install.md", "quickstart.md"))]
    for page in pages:
        text = page if isinstance(page, str) else page.read_text(encoding="utf-8")
        assert test_quickstart.README_COMMAND in text, page if isinstance(page, Path) else "README"
    environment = (DOCS / "reference" / "environment.md").read_text(encoding="utf-8")
    assert "The README's quickstart command sets `OMP_NUM_THREADS=1`" in environment


def test_quickstart_page_states_the_figures_the_quickstart_test_asserts():
    page = (DOCS / "getting-started" / "quickstart.md").read_text(encoding="utf-8")
    assert f"**{test_quickstart.FIRST:.2f}**" in page
    assert f"**{test_quickstart.LAST:.2f}**" in page
    assert f"±{test_quickstart.FIRST_TOL:.2f}" in page
    assert f"{test_quickstart.LAST - test_quickstart.LAST_TOL:.2f} or more" in page


# --------------------------------------------------------------------------- the whole site

SPHINX_MISSING = [
    m for m in ("sphinx", "myst_parser", "furo") if importlib.util.find_spec(m) is None
]


@pytest.mark.slow
@pytest.mark.skipif(
    bool(SPHINX_MISSING),
    reason=f"the docs extra is not installed ({', '.join(SPHINX_MISSING)} missing): "
    "pip install -e '.[docs]'",
)
def test_the_docs_build_with_warnings_as_errors(tmp_path):
    began = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(DOCS),
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    html = (tmp_path / "html" / "reference" / "config.html").read_text(encoding="utf-8")
    assert "max_reward_error_frac" in html  # the generated part is on the built page
    assert time.monotonic() - began < 600


def test_the_rewards_page_lists_every_builtin_reward_and_the_algorithms_page_every_algorithm():
    """#43 item 8: the built-in rewards table lacked ``reasoning_gym``. Each table lists
    exactly the plugins of its kind that ship with rlvr (what ``rlvr plugins`` lists)."""
    host = create_host()
    pages = {
        "reward": ("rewards.md", "The built-in rewards"),
        "algorithm": ("algorithms.md", "The built-in algorithms"),
    }
    for kind, (page, heading) in pages.items():
        text = (DOCS / "concepts" / page).read_text(encoding="utf-8")
        table = tables_by_heading(text, "##")[heading]
        builtin = [name for name, r in host.records[kind].items() if r.dist == "rlvr"]
        assert sorted(table) == sorted(builtin), f"{page}: {heading}"
    # the config page's transcript of an unknown reward lists them as the error does
    config_page = (DOCS / "concepts" / "config.md").read_text(encoding="utf-8")
    listed = re.search(r"unknown reward 'anwser'.*Available: ([\w, ]+)\.", config_page)
    assert listed is not None
    rewards = host.records["reward"].items()
    assert listed.group(1).split(", ") == sorted(n for n, r in rewards if r.dist == "rlvr")
