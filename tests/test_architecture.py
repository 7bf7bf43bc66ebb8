"""The architecture, checked on the source tree: what may import what, where a late import is
allowed, that every package says what it is for, that the public API resolves and stays light,
and that the import contract in pyproject.toml (``.ci/layers``) catches a reversed import and a
cycle hidden by a late import.

Each rule is a function over source text, so the tests below also feed it a bad example and
check that it objects: a rule that cannot fail would prove nothing.
"""

from __future__ import annotations

import ast
import importlib
import io
import os
import subprocess
import sys
import tokenize
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlvr
import rlvr.plugin

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "core"
PLUGINS = REPO / "plugins"
TEMPLATES = CORE / "cli" / "templates"

#: The public tiers: what code outside rlvr's internals may import of rlvr (besides its own
#: package). ``rlvr`` for scripts, ``rlvr.plugin`` for plugin authors.
PUBLIC_MODULES = ("rlvr", "rlvr.plugin", "rlvr.functional", "rlvr.testing")
#: What only the built-in plugins use: they may import it too, nothing else outside core may.
BUILTIN_MODULE = "rlvr._builtin"

#: Every import inside a function in core/ and plugins/: module -> {imported module: why}.
#: Anything else belongs at the top of its module. The allowed ones are optional extras, and in
#: the entry layers (rlvr.cli, rlvr.runs, rlvr.testing) what would make ``rlvr --help``,
#: ``rlvr plugins`` or loading the pytest plugin slow.
ALLOWED_LATE_IMPORTS: dict[str, dict[str, str]] = {
    "rlvr.cli.commands": {
        "rlvr.evaluation.paths": "torch, transformers (export)",
        "rlvr.model.lora": "torch, transformers (export)",
        "rlvr.rewards.score_file": "tqdm and the reward pool: a third of `rlvr --help`",
        "rlvr.cli.env_check": "torch, transformers (env check samples episodes)",
    },
    # rlvr validate and train report a config's errors before torch loads (#45 item 12)
    "rlvr.training.preflight": {
        "datasets": "datasets (the data's checks)",
        "rlvr.data.prompts": "numpy, and datasets through the data source (the data's checks)",
        "rlvr.model.loading": "torch, transformers (the model's and the algorithm's checks)",
        "rlvr.evaluation.paths": "torch, transformers, datasets (the eval data's checks)",
        "rlvr.outputs.resume": "torch (the checkpoint's checks, --resume)",
    },
    "rlvr.rewards.score_file": {
        "rlvr.model.loading": "torch, transformers: only for rows without completion_ids",
    },
    "rlvr.runs": {
        "rlvr.training.preflight": "torch, transformers, datasets (validate)",
        "rlvr.training.launch": "torch, transformers (train)",
        "rlvr.evaluation.evaluate": "torch, transformers (evaluate)",
        "rlvr.data.prompts": "numpy (rlvr.Trainer's in-memory rows)",
    },
    # pytest loads rlvr.testing (all its modules) in every session: its checks load the rest
    "rlvr.testing.conformance": {"rlvr.api.host": "pydantic", "pydantic": "pydantic"},
    "rlvr.testing.config": {"rlvr.api.host": "pydantic", "rlvr.config.schema": "pydantic"},
    "rlvr.testing.fixtures": {
        "rlvr.api.host": "pydantic",
        "rlvr.model.tiny": "torch, transformers",
    },
    "rlvr.testing.reward": {"rlvr.api.registration": "pydantic"},
    "rlvr.testing.algorithm": {
        "rlvr.api.host": "pydantic",
        "rlvr.api.registration": "pydantic",
        "torch": "torch",
    },
    "rlvr.testing.backend": {
        "rlvr.api.registration": "pydantic",
        "rlvr.config.schema": "pydantic",
        "rlvr.model.loading": "torch, transformers",
        "torch": "torch",
    },
    "rlvr.testing.environment": {"rlvr.rollout.envcheck": "pydantic, torch"},
    "rlvr.testing.data_source": {"rlvr.data.prompts": "pydantic"},
    # verifiers: the environment says how to install it when a config names it
    "rlvr.plugins.environments.verifiers": {
        "verifiers.v1": "optional extra rlvr[verifiers]",
        "aiohttp": "a dependency of the optional extra rlvr[verifiers]",
    },
    # quiet_third_party tells a library that is already loaded; it never loads one
    "rlvr.outputs.console": {
        "huggingface_hub.utils": "only once huggingface_hub is loaded",
        "transformers.utils": "only once transformers is loaded",
        "datasets.utils": "only once datasets is loaded",
    },
    "rlvr.model.loading": {"gguf": "optional extra rlvr[gguf]"},
    "rlvr.model.tiny": {"gguf": "optional extra rlvr[gguf]"},
    "rlvr.model.lora": {"peft": "optional extra rlvr[lora]"},
    "rlvr.model.weights": {"peft": "optional extra rlvr[lora]"},
    # reasoning-gym: imported only where a config asks for a task (rlvr.data is imported by
    # every run, and the package takes 1.5 s to import)
    "rlvr.data.reasoning_gym": {"reasoning_gym": "optional extra rlvr[reasoning-gym]"},
    "rlvr.model.logprobs": {"peft.tuners.tuners_utils": "optional extra rlvr[lora]"},
    # the loggers: each imports its library when a run starts it
    "rlvr.plugins.callbacks.tensorboard": {
        "torch.utils.tensorboard": "optional extra rlvr[tensorboard]",
    },
    "rlvr.plugins.callbacks.wandb": {"wandb": "optional extra rlvr[wandb]"},
    "rlvr.plugins.callbacks.trackio": {"trackio": "optional extra rlvr[trackio]"},
    "rlvr.plugins.callbacks.mlflow": {"mlflow": "optional extra rlvr[mlflow]"},
    "rlvr.training.callbacks": {
        "transformers": "only for a transformers.TrainerCallback a script passes",
    },
    "rlvr.outputs.plot": {
        "matplotlib": "optional extra rlvr[plot]",
        "matplotlib.figure": "optional extra rlvr[plot]",
        "matplotlib.ticker": "optional extra rlvr[plot]",
    },
    "rlvr.plugins.backends.vllm": {
        "vllm": "optional extra rlvr[vllm], after its environment is set",
        "vllm.inputs": "optional extra rlvr[vllm]",
        "vllm.distributed.parallel_state": "optional extra rlvr[vllm]",
        "vllm.lora.request": "optional extra rlvr[vllm]",
    },
    "rlvr.plugins.backends.vllm_servers": {
        "rlvr.plugins.backends.vllm_nccl": "vLLM's NCCL engine, only for weight_transfer: nccl",
    },
}


# --------------------------------------------------------------------------- reading source


def module_name(path: Path) -> str:
    """The dotted name ``path`` is imported as (core/ is ``rlvr``, plugins/ ``rlvr.plugins``;
    elsewhere, templates included, the path from the repository's root)."""
    if path.is_relative_to(PLUGINS):
        parts = ["rlvr", "plugins", *path.relative_to(PLUGINS).with_suffix("").parts]
    elif path.is_relative_to(CORE) and not path.is_relative_to(TEMPLATES):
        parts = ["rlvr", *path.relative_to(CORE).with_suffix("").parts]
    else:
        parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(*roots: Path) -> list[Path]:
    """The project's own Python files under ``roots``: not caches, nor a virtualenv inside
    one (``bench/.venv-trl``, which bench/vs_trl.py creates, holds TRL, torch and the rest)."""
    return sorted(
        p
        for root in roots
        for p in root.rglob("*.py")
        if "__pycache__" not in p.parts and not any(part.startswith(".venv") for part in p.parts)
    )


def imported_modules(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The modules an import statement names (``from rlvr import x`` names ``rlvr``; a relative
    import is resolved against ``importer``, a module's dotted name)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = importer.split(".")
        base = package[: len(package) - node.level + (1 if importer_is_package(importer) else 0)]
        return [".".join([*base, *([node.module] if node.module else [])])]
    return [node.module or ""]


def importer_is_package(name: str) -> bool:
    return name in _PACKAGES


_PACKAGES = {module_name(p) for p in python_files(CORE, PLUGINS) if p.name == "__init__.py"}


def imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of ``tree`` and whether it runs inside a function."""

    def visit(
        node: ast.AST, in_function: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from visit(child, in_function or nested)

    yield from visit(tree, False)


# --------------------------------------------------------------------------- the rules


def private_imports(source: str, importer: str, own_package: str | None) -> list[str]:
    """The imports of rlvr in ``source`` that are not the public API: only the modules of
    :data:`PUBLIC_MODULES` and the names in their ``__all__`` (and ``own_package`` and its
    modules, plus :data:`BUILTIN_MODULE`, for a built-in plugin family)."""
    allowed = PUBLIC_MODULES + ((BUILTIN_MODULE,) if own_package else ())
    problems = []
    for node, _ in imports(ast.parse(source)):
        for module in imported_modules(node, importer):
            if module.split(".")[0] != "rlvr":
                continue
            if own_package and (module == own_package or module.startswith(own_package + ".")):
                continue
            if module not in allowed:
                problems.append(f"line {node.lineno}: imports {module}")
            elif isinstance(node, ast.ImportFrom) and node.module == module:
                exported = set(importlib.import_module(module).__all__)
                if module == "rlvr":
                    exported |= {m.removeprefix("rlvr.") for m in PUBLIC_MODULES}
                unknown = [a.name for a in node.names if a.name not in exported]
                if unknown:
                    problems.append(
                        f"line {node.lineno}: {module} has no public {', '.join(unknown)}"
                    )
    return problems


def late_import_problems(source: str, importer: str) -> list[str]:
    """Imports inside functions of ``source`` that are not in :data:`ALLOWED_LATE_IMPORTS` for
    ``importer``, or carry no comment (on their lines or on the line above their block)."""
    lines = source.splitlines()
    commented = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    late = [node for node, in_function in imports(ast.parse(source)) if in_function]
    import_lines = {n for node in late for n in range(node.lineno, (node.end_lineno or 0) + 1)}
    allowed = ALLOWED_LATE_IMPORTS.get(importer, {})
    problems = []
    for node in late:
        for module in imported_modules(node, importer):
            if module not in allowed:
                problems.append(f"line {node.lineno}: {module} imported inside a function")
        own = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        above = node.lineno - 1
        while above > 0 and (above in import_lines or not lines[above - 1].strip()):
            above -= 1
        if not own & commented and above not in commented:
            problems.append(f"line {node.lineno}: a late import without a comment saying why")
    return problems


# --------------------------------------------------------------------------- (a) public API


def _public_api_files() -> list[tuple[Path, str | None]]:
    out: list[tuple[Path, str | None]] = []
    for path in python_files(REPO / "examples", REPO / "bench", TEMPLATES):
        out.append((path, None))
    for path in python_files(PLUGINS):
        family = path.relative_to(PLUGINS).parts
        out.append((path, f"rlvr.plugins.{family[0]}" if len(family) > 1 else None))
    return out


@pytest.mark.parametrize(
    ("path", "own"),
    _public_api_files(),
    ids=lambda x: str(x.relative_to(REPO)) if isinstance(x, Path) else str(x),
)
def test_examples_bench_templates_and_plugins_import_only_the_public_api(path, own):
    problems = private_imports(path.read_text(), module_name(path), own)
    assert not problems, (
        f"{path.relative_to(REPO)} must import only {', '.join(PUBLIC_MODULES)} (names in "
        f"their __all__; a built-in plugin {BUILTIN_MODULE} too): " + "; ".join(problems)
    )


def test_the_public_api_rule_objects_to_internals():
    plugin = "rlvr.plugins.rewards.mine"
    assert private_imports("from rlvr.plugin import Reward", plugin, None) == []
    assert private_imports("from rlvr import functional, load_config", plugin, None) == []
    assert private_imports("from rlvr import Reward", plugin, None)  # the authors' tier
    assert private_imports("from rlvr.plugin import load_config", plugin, None)  # scripts'
    assert private_imports("from rlvr._builtin import load_function", plugin, None)
    assert (
        private_imports("from rlvr._builtin import load_function", plugin, "rlvr.plugins.x") == []
    )
    assert private_imports("from rlvr._builtin import Reward", plugin, "rlvr.plugins.x")
    assert private_imports("from rlvr.functional import masked_mean", plugin, None) == []
    assert private_imports("from rlvr.training.update import PolicyUpdate", plugin, None)
    assert private_imports("import rlvr.functional.losses", plugin, None)
    assert private_imports("from rlvr import PolicyUpdate", plugin, None)
    assert private_imports("def f():\n    from rlvr.api import host\n", plugin, None)
    own = "rlvr.plugins.rewards"
    assert private_imports("from .params import P", "rlvr.plugins.rewards.answer", own) == []
    assert private_imports("from rlvr.plugins.algorithms.params import P", plugin, own)


# --------------------------------------------------------------------------- (b) late imports


def _internal_files() -> list[Path]:
    """core/ and plugins/ but the templates (those are checked as users' code, above)."""
    return [p for p in python_files(CORE, PLUGINS) if not p.is_relative_to(TEMPLATES)]


@pytest.mark.parametrize("path", _internal_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_inside_functions_are_allowed_and_explained(path):
    problems = late_import_problems(path.read_text(), module_name(path))
    assert not problems, (
        f"{path.relative_to(REPO)}: " + "; ".join(problems) + ". Import at the module top; "
        "only an optional extra, or in the entry layers what would make `rlvr --help`, `rlvr "
        "plugins` or the pytest plugin slow, may be imported late (tests/test_architecture.py "
        "ALLOWED_LATE_IMPORTS), with a comment saying why"
    )


def test_the_allowlist_names_only_late_imports_that_exist():
    found: dict[str, set[str]] = {}
    for path in _internal_files():
        name = module_name(path)
        for node, in_function in imports(ast.parse(path.read_text())):
            if in_function:
                found.setdefault(name, set()).update(imported_modules(node, name))
    stale = {
        f"{importer}: {module}"
        for importer, modules in ALLOWED_LATE_IMPORTS.items()
        for module in modules
        if module not in found.get(importer, set())
    }
    assert not stale, f"ALLOWED_LATE_IMPORTS lists imports that are gone: {sorted(stale)}"


def test_the_late_import_rule_objects():
    bad = "def f():\n    from rlvr.model.loading import load_policy  # torch\n"
    assert late_import_problems(bad, "rlvr.rollout.runner")
    assert late_import_problems("def f():\n    import json\n", "rlvr.rollout.runner")
    silent = "def f():\n    x = 1\n    import peft\n"
    assert late_import_problems(silent, "rlvr.model.lora") == [
        "line 3: a late import without a comment saying why"
    ]
    block = "def f():\n    # optional extra, for both\n    import peft\n\n    import peft\n"
    assert late_import_problems(block, "rlvr.model.lora") == []
    assert late_import_problems("def f():\n    import peft  # optional\n", "rlvr.model.lora") == []
    assert late_import_problems("import json\n", "rlvr.rollout.runner") == []


# --------------------------------------------------------------------------- private names


def private_names_imported(source: str) -> list[str]:
    """``_private`` names ``source`` imports from an rlvr module (or its own package): a helper
    another module needs is public (or moves next to its users)."""
    return [
        f"line {node.lineno}: {alias.name} from {'.' * node.level}{node.module or ''}"
        for node, _ in imports(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        and (node.level or (node.module or "").split(".")[0] == "rlvr")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


@pytest.mark.parametrize("path", _internal_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_private_name_is_imported_across_modules(path):
    problems = private_names_imported(path.read_text())
    assert not problems, f"{path.relative_to(REPO)}: " + "; ".join(problems)


def test_the_private_name_rule_objects():
    assert private_names_imported("from rlvr.functional.stats import _f32, masked_mean")
    assert private_names_imported("def f():\n    from .stats import _bool\n")
    assert private_names_imported("from rlvr import __version__, hookimpl") == []
    assert private_names_imported("from os.path import _get_sep") == []


# --------------------------------------------------------------------------- one plugin layout


@pytest.mark.parametrize("family", ["rewards", "algorithms", "backends", "environments"])
def test_every_plugin_family_has_one_layout(family):
    """``__init__.py`` registers, ``params.py`` holds every params model, and each factory is a
    ``LazyFactory`` naming an implementation module of the family (or a public rlvr name)."""
    package = importlib.import_module(f"rlvr.plugins.{family}")
    host = rlvr.create_host(entrypoints=False, plugins=[package])
    records = [r for kind in host.records.values() for r in kind.values()]
    assert records and not host.failures
    for record in records:
        assert record.params.__module__ == f"rlvr.plugins.{family}.params", record.name
        assert isinstance(record.factory, rlvr.plugin.LazyFactory), record.name
        module, _, attr = record.factory.target.partition(":")
        if module in ("rlvr.plugin", "rlvr._builtin"):
            assert attr in importlib.import_module(module).__all__, record.factory
        else:
            assert module.startswith(f"rlvr.plugins.{family}."), record.factory
            assert (PLUGINS / family / f"{module.rsplit('.', 1)[1]}.py").is_file()


# --------------------------------------------------------------------------- (c) packages


def _core_packages() -> list[Path]:
    """Every directory of Python modules under core/ and plugins/ (templates aside)."""
    dirs = {p.parent for p in _internal_files()}
    return sorted(dirs)


@pytest.mark.parametrize("package", _core_packages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_package_has_an_init_that_says_what_it_is_for(package):
    init = package / "__init__.py"
    assert init.is_file(), f"{package.relative_to(REPO)} has no __init__.py (a namespace package)"
    docstring = ast.get_docstring(ast.parse(init.read_text()))
    assert docstring, f"{init.relative_to(REPO)} has no docstring saying what the package is for"


#: The most lines a module of core/ may have, unless its docstring says it is a declared data
#: table (#43 item 6: one job per module).
MAX_MODULE_LINES = 600
#: rlvr.training.trainer is the loop and nothing else: wiring lives in setup.py, decisions in
#: small policies (#43 item 2).
MAX_TRAINER_LINES = 450


def test_core_modules_are_small_or_declared_data():
    long = {
        str(path.relative_to(REPO)): n
        for path in sorted(CORE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
        and "declared data table" not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    }
    assert not long, f"over {MAX_MODULE_LINES} lines, split along a seam: {long}"


def test_the_training_loop_stays_a_loop():
    lines = len((CORE / "training" / "trainer.py").read_text().splitlines())
    assert lines <= MAX_TRAINER_LINES, f"trainer.py has {lines} lines: move wiring to setup.py"


def test_every_core_subpackage_is_shipped_and_placed_in_the_layers():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = set(project["tool"]["setuptools"]["packages"])
    (layers,) = [c for c in project["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    layered = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    subpackages = {module_name(p / "__init__.py") for p in _core_packages()}
    assert subpackages - packages == set(), "missing from [tool.setuptools] packages"
    top = {
        f"rlvr.{p.stem}"
        for p in CORE.iterdir()
        if p.name not in ("__init__.py", "__main__.py", "__pycache__")
        and (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    assert top - layered == set(), "core modules outside the layers contract"


# --------------------------------------------------------------------------- (d) the facade


#: The modules that gather names lazily (core/_lazy.py), each with the names it defines itself.
LAZY_MODULES = {
    "rlvr": {"__version__"},
    "rlvr.plugin": {"hookimpl"},
    "rlvr._builtin": set(),
}


@pytest.mark.parametrize("name", list(LAZY_MODULES))
def test_every_public_name_resolves(name):
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what {name} does not define: {missing}"
    assert set(module._EXPORTS) | LAZY_MODULES[name] == set(module.__all__)


@pytest.mark.parametrize("name", list(LAZY_MODULES))
def test_the_facade_is_declared_for_type_checkers(name):
    """The TYPE_CHECKING block of each lazy module imports every lazy name (else mypy and
    editors do not see ``rlvr.train``), each from the module ``_EXPORTS`` says."""
    module = importlib.import_module(name)
    tree = ast.parse(Path(module.__file__).read_text())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    ]
    declared = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            declared[alias.asname or alias.name] = node.module
    assert declared == module._EXPORTS


def _loaded_after(code: str) -> str:
    heavy = "{'torch', 'pydantic', 'transformers'}"
    probe = f"import sys\n{code}\nprint(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_hook_marker_loads_neither_torch_nor_pydantic():
    assert _loaded_after("from rlvr.plugin import hookimpl") == "[]"
    assert _loaded_after("import rlvr") == "[]"


def test_a_plugin_module_s_imports_load_no_torch():
    assert _loaded_after("from rlvr.plugin import hookimpl, Reward, Sample") == "['pydantic']"


# --------------------------------------------------------------------------- (e) the contract


def _package_tree(root: Path, edits: dict[str, str] | None = None) -> Path:
    """core/ and plugins/ laid out as the installed package under ``root`` (links, as
    ``.ci/layers`` does); each of ``edits`` (a path under core/ -> text to append) a copy."""
    edits = edits or {}
    tree = root / "tree"
    package = tree / "rlvr"
    package.mkdir(parents=True)
    (package / "plugins").symlink_to(PLUGINS)
    edited_dirs = {Path(p).parts[0] for p in edits}
    for entry in CORE.iterdir():
        if entry.name not in edited_dirs:
            (package / entry.name).symlink_to(entry)
            continue
        (package / entry.name).mkdir()
        for inner in entry.iterdir():
            rel = f"{entry.name}/{inner.name}"
            if rel in edits:
                (package / rel).write_text(inner.read_text() + edits[rel])
            else:
                (package / rel).symlink_to(inner)
    return tree


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    return subprocess.run(
        [sys.executable, "-c", code, str(REPO / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def importlinter():
    pytest.importorskip(
        "importlinter", reason="import-linter is not installed (pip install 'rlvr[test]')"
    )


def test_the_contract_holds_for_the_tree(importlinter, tmp_path):
    result = _lint_imports(_package_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("edits", "broken", "why"),
    [
        (
            {"api/errors.py": "\nimport rlvr.training  # noqa: E402\n"},
            "core layers: each layer imports only from the layers below it BROKEN",
            "rlvr.api.errors -> rlvr.training",
        ),
        (
            {"model/loading.py": "\n\ndef _late():\n    from rlvr.model.lora import is_peft\n"},
            "acyclically BROKEN",
            ".lora -> .loading",
        ),
        (
            {"training/trainer.py": "\nimport rlvr.compat.trl.keys  # noqa: E402\n"},
            "core layers: each layer imports only from the layers below it BROKEN",
            "rlvr.training.trainer -> rlvr.compat.trl.keys",
        ),
    ],
    ids=["reversed-layer-import", "cycle-behind-a-late-import", "core-imports-compat"],
)
def test_the_contract_catches(importlinter, tmp_path, edits, broken, why):
    result = _lint_imports(_package_tree(tmp_path, edits))
    assert result.returncode != 0
    assert broken in " ".join(result.stdout.split()), result.stdout
    assert why in result.stdout, result.stdout
