"""``rlvr new plugin``: the generated packages are valid, installable, and their tests pass.

Fast tests generate each kind, make it look installed (a ``dist-info`` with its entry point on
``sys.path``) and run the generated test functions in-process. The slow test installs generated
packages with ``pip install -e`` into a fresh venv and runs their pytest there.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rlvr.api.host import PluginError, create_host
from rlvr.cli import main as cli
from rlvr.cli.scaffold import ScaffoldError, check_name, new_plugin, render
from rlvr.plugin import LazyFactory

sys.path.insert(0, str(Path(__file__).parent))

from plugin_venv import install_editable, make_venv, rlvr, run  # noqa: E402

KINDS = ("reward", "algorithm", "backend", "environment")


def fake_install(package: Path, name: str, monkeypatch) -> None:
    """What ``pip install -e`` does for discovery: the package on sys.path and a dist-info
    declaring its ``rlvr`` entry point."""
    site = package.parent / f"site-{name}"
    info = site / f"rlvr_{name}-0.1.0.dist-info"
    info.mkdir(parents=True)
    dist = "rlvr-" + name.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[rlvr]\n{name} = rlvr_{name}\n")
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.syspath_prepend(str(site))


def load_by_path(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_tests_of(module) -> list[str]:
    """Call every ``test_*`` function of ``module`` (expanding ``parametrize``)."""
    ran = []
    for name in sorted(dir(module)):
        fn = getattr(module, name)
        if not (name.startswith("test_") and callable(fn)):
            continue
        cases: list[dict] = [{}]
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize":
                argnames, argvalues = mark.args
                names = [a.strip() for a in argnames.split(",")]
                cases = [
                    {**case, **dict(zip(names, v if len(names) > 1 else [v], strict=True))}
                    for case in cases
                    for v in argvalues
                ]
        for case in cases:
            fn(**case)
            ran.append(f"{name}{case or ''}")
    return ran


@pytest.fixture
def unload():
    """Forget the generated modules afterwards (names repeat across tests)."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("rlvr_gen"):
            del sys.modules[name]


@pytest.mark.parametrize("kind", KINDS)
def test_generated_package_works(kind, tmp_path, monkeypatch, unload):
    name = f"gen_{kind}"
    package = new_plugin(f"gen-{kind}", kind=kind, directory=tmp_path)  # normalised to gen_...
    assert package == tmp_path / f"rlvr-gen-{kind}"
    assert not list(tmp_path.glob(".rlvr-*"))  # no staging directory left behind
    files = {p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file()}
    assert {"pyproject.toml", "README.md", f"rlvr_{name}/__init__.py"} <= files
    assert f"tests/test_{name}.py" in files

    meta = tomllib.loads((package / "pyproject.toml").read_text())
    assert meta["project"]["name"] == f"rlvr-gen-{kind}"
    assert meta["project"]["entry-points"]["rlvr"] == {name: f"rlvr_{name}"}
    assert meta["build-system"]["build-backend"] == "setuptools.build_meta"
    assert "rlvr" in meta["project"]["dependencies"]

    # The plugin family's layout: the registration, the params model, the implementation.
    impl = {"reward": "reward", "algorithm": "algorithm", "backend": "generator"}.get(kind, kind)
    layout = {f"rlvr_{name}/{m}.py" for m in ("__init__", "params", impl)}
    assert {f for f in files if f.startswith(f"rlvr_{name}/")} == layout

    # The plugin module itself: one registration of the right kind, cheap to import (the
    # implementation loads when a run builds it).
    monkeypatch.syspath_prepend(str(package))
    module = importlib.import_module(f"rlvr_{name}")
    host = create_host(entrypoints=False, plugins=[module])
    assert host.failures == []
    assert list(host.records[kind]) == [name]
    record = host.records[kind][name]
    assert module.__doc__ and record.description
    assert isinstance(record.factory, LazyFactory)
    assert record.factory.target.startswith(f"rlvr_{name}.{impl}:")
    assert f"rlvr_{name}.{impl}" not in sys.modules
    assert "import torch" not in (package / f"rlvr_{name}" / "__init__.py").read_text()

    # The generated tests, run in-process against the "installed" package.
    fake_install(package, name, monkeypatch)
    listed = create_host()
    assert name in listed.records[kind] and listed.records[kind][name].dist == f"rlvr-gen-{kind}"
    tests = load_by_path(package / "tests" / f"test_{name}.py", f"rlvr_gen_tests_{kind}")
    ran = run_tests_of(tests)
    assert any("contract" in t for t in ran) and any("config" in t for t in ran)


def test_generated_code_is_lint_clean(tmp_path):
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    for kind in KINDS:
        package = new_plugin(f"a_long_plugin_name_{kind}", kind=kind, directory=tmp_path)
        rules = ["--isolated", "--line-length", "100"]
        run(ruff, "check", *rules, "--select", "E,F,W,I,UP,B,SIM", ".", cwd=package)
        run(ruff, "format", *rules, "--check", ".", cwd=package)


@pytest.mark.parametrize(
    ("name", "kind", "message"),
    [
        ("my reward!", "reward", r"invalid plugin name 'my reward!'.*e\.g\. 'my_reward'"),
        ("1st", "reward", r"starting with a letter.*e\.g\. 'my_1st'"),
        ("", "reward", "invalid plugin name ''"),
        ("x" * 51, "reward", "at most 50 characters"),
        ("class", "algorithm", "Python keyword"),
        ("format", "reward", "reward named 'format' is already registered by rlvr"),
        ("grpo", "algorithm", "already registered by rlvr"),
        ("ok", "metric", "unknown plugin kind 'metric'"),
    ],
)
def test_bad_names_are_refused(name, kind, message, tmp_path):
    with pytest.raises(ScaffoldError, match=message):
        new_plugin(name, kind=kind, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_name_of_another_kind_is_fine():
    check_name("format", "algorithm")  # only rewards have a "format"


def test_never_overwrites(tmp_path):
    package = new_plugin("mine", kind="reward", directory=tmp_path)
    (package / "README.md").write_text("my notes")
    with pytest.raises(ScaffoldError, match="already exists"):
        new_plugin("mine", kind="reward", directory=tmp_path)
    assert (package / "README.md").read_text() == "my notes"


@pytest.mark.parametrize("given", ["acme-reward", "acme_reward", "Acme.Reward", "acme--reward"])
def test_names_are_normalised(given, tmp_path):
    package = new_plugin(given, kind="reward", directory=tmp_path)
    assert package.name == "rlvr-acme-reward"
    meta = tomllib.loads((package / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "rlvr-acme-reward"
    assert meta["project"]["entry-points"]["rlvr"] == {"acme_reward": "rlvr_acme_reward"}
    assert (package / "rlvr_acme_reward" / "__init__.py").is_file()
    assert 'name="acme_reward"' in (package / "rlvr_acme_reward" / "__init__.py").read_text()


def test_templates_ship_as_package_data():
    from importlib import resources

    root = resources.files("rlvr.cli") / "templates" / "plugin"
    for kind in KINDS:
        assert (root / kind / "__MODULE__" / "__init__.py").is_file()
        assert (root / kind / "tests" / "test___NAME__.py").is_file()
    assert (root / "common" / "pyproject.toml").is_file()


def test_render_substitutes_everything():
    for kind in KINDS:
        for path, text in render("some_thing", kind).items():
            assert "__" not in path.replace("__init__", "")
            leftovers = [t for t in ("__NAME__", "__CLS__", "__MODULE__", "__DIST__") if t in text]
            assert not leftovers, (path, leftovers)
    assert "class SomeThing:" in render("some_thing", "reward")["rlvr_some_thing/reward.py"]


def test_cli(tmp_path, capsys):
    assert cli.main(["new", "plugin", "cli_made", "--kind", "backend", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    made = tmp_path / "rlvr-cli-made"
    assert f"wrote {made}" in out
    # pytest from the test extra, run by this environment's python (a pytest elsewhere on PATH
    # would not see rlvr)
    assert f"next: pip install -e '{made}[test]' && python -m pytest {made}" in out
    assert cli.main(["new", "plugin", "Bad Name", "--kind", "reward", "--dir", str(tmp_path)]) == 3
    assert "error: invalid plugin name 'bad name'" in capsys.readouterr().err
    assert issubclass(ScaffoldError, PluginError) and issubclass(ScaffoldError, ValueError)


# --------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_pip_install_e_then_tests_pass_and_plugins_lists_it(tmp_path):
    python = make_venv(tmp_path)
    for kind in KINDS:
        name = f"fresh_{kind}"
        package = new_plugin(name, kind=kind, directory=tmp_path / "src")
        install_editable(python, package)
        result = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert " passed" in result.stdout and "failed" not in result.stdout
    listing = json.loads(rlvr(python, "plugins", "--json"))
    assert listing["failures"] == []
    found = {
        (r["kind"], r["name"]): p["dist"]
        for p in listing["plugins"]
        for r in p["registers"]
        if p["dist"] and p["dist"].startswith("rlvr-fresh")
    }
    assert set(found) == {(kind, f"fresh_{kind}") for kind in KINDS}
    # Editable: a change to the source shows without reinstalling.
    init = tmp_path / "src" / "rlvr-fresh-reward" / "rlvr_fresh_reward" / "__init__.py"
    init.write_text(init.read_text().replace("score when the completion", "EDITED: score when"))
    assert "EDITED" in rlvr(python, "plugins")
