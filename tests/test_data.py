"""Loading a dataset file: bad rows are named by line with what to fix, never a traceback."""

from __future__ import annotations

import pytest

from rlvr.api.host import create_host
from rlvr.cli.main import main
from rlvr.config.schema import DataConfig
from rlvr.data.prompts import DataError, load_rows


def _load(path):
    return load_rows(DataConfig(path=str(path)), create_host())


def test_jsonl_rows_load_with_blank_lines_and_line_separators_inside_strings(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a\u2028b", "answer": "1"}\n\n{"prompt": "c", "answer": "2"}\n')
    assert _load(path) == [{"prompt": "a\u2028b", "answer": "1"}, {"prompt": "c", "answer": "2"}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": "2",}\n',
            "line 2 is not valid JSON (Expecting property name enclosed in double quotes",
        ),
        ("prompt,answer\na,1\n", "line 1 is not valid JSON"),  # a CSV file named .jsonl
        ('{"prompt": "a"}\n["b", "2"]\n', "line 2 is a JSON list, not an object"),
        ("", "is empty: it holds no JSON rows"),
        ("\n  \n", "is empty: it holds no JSON rows"),
    ],
)
def test_a_bad_jsonl_file_names_the_line_and_the_fix(tmp_path, text, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(DataError, match="data.path") as info:
        _load(path)
    assert message in str(info.value)
    if "line" in message:
        assert "each line must hold one JSON object" in str(info.value)


def test_other_unreadable_files_say_so(tmp_path):
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match="is not UTF-8 text"):
        _load(tmp_path / "bin.jsonl")
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(DataError, match="is an empty file"):
        _load(tmp_path / "empty.json")
    (tmp_path / "broken.json").write_text('[{"prompt": "a",')
    with pytest.raises(DataError, match="cannot be read as json"):
        _load(tmp_path / "broken.json")
    (tmp_path / "rows.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot be read as parquet"):
        _load(tmp_path / "rows.parquet")


def test_validate_reports_a_bad_line_as_a_config_problem(tmp_path, capsys, tiny_model_dir):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n{"prompt": oops}\n')
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\n"
        "data: {path: rows.jsonl}\nrewards: [{name: answer}]\n"
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"data.path: '{rows}': line 2 is not valid JSON" in err
    assert "Traceback" not in err
