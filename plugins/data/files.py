"""``file``: the rows of a .json/.jsonl/.parquet file, a directory of them, or a hub dataset
(``data.path``'s source). A bad JSONL line is named by its number, before ``datasets``
parses the file (its parser would report a row index in a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets

from rlvr import RlvrError
from rlvr.plugins.data.params import FileParams

_FILE_KINDS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


class FileDataError(RlvrError, ValueError):
    """The file cannot be read as rows; the message names it (and the line) and the fix."""


def file_rows(params: FileParams, split: str) -> datasets.Dataset:
    """The rows of ``params.path``: a local file with the ``json`` or ``parquet`` builder (all
    its rows, whatever ``split`` says); a local directory or a hub name by
    ``load_dataset(path, split=split)``."""
    written = params.path
    path = Path(written).expanduser()
    if path.is_file():
        kind = _FILE_KINDS.get(path.suffix.lower())
        if kind is None:
            raise FileDataError(
                f"data.path {written!r}: unsupported file type {path.suffix!r}; use a .json, "
                ".jsonl or .parquet file, a directory of them, or a hub dataset name"
            )
        if path.suffix.lower() == ".jsonl":
            _check_jsonl(path, written)
        elif path.stat().st_size == 0:
            raise FileDataError(f"data.path {written!r} is an empty file: it holds no rows")
        try:
            ds = datasets.load_dataset(kind, data_files=str(path), split="train")
        except Exception as exc:  # datasets wraps the parser's error in a generation error
            cause = exc.__cause__ or exc
            raise FileDataError(
                f"data.path {written!r} cannot be read as {kind}: {type(cause).__name__}: {cause}"
            ) from None
    elif path.is_dir():
        try:
            ds = datasets.load_dataset(str(path), split=split)
        except ValueError as exc:  # e.g. 'Unknown split "validation"'
            raise FileDataError(f"data.path {written!r} (split {split!r}): {exc}") from None
    else:
        looks_local = written.startswith((".", "/", "~")) or path.suffix in _FILE_KINDS
        if looks_local:
            raise FileDataError(f"data.path {written!r} does not exist")
        try:
            ds = datasets.load_dataset(written, split=split)
        except Exception as exc:  # offline, unknown name, bad split: say which and why
            raise FileDataError(
                f"cannot load dataset {written!r} (split {split!r}): {type(exc).__name__}: {exc}"
            ) from None
    if len(ds) == 0:
        raise FileDataError(f"data.path {written!r} (split {split!r}) has no rows")
    return ds  # rlvr reads the rows it keeps (data.max_samples) into memory


def _check_jsonl(path: Path, written: str) -> None:
    """Each non-blank line is one JSON object, and there is one at least: a bad line is named
    by its number, where the ``datasets`` parser would report a row index in a traceback."""
    rows = 0
    try:
        # Streamed; a text file splits only at \n, \r and \r\n, never at a U+2028 in a string.
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                rows += _json_row(line, number, written)
    except UnicodeDecodeError as exc:
        number, column = _undecodable(path)
        where = f": line {number}, column {column}" if number else ""
        raise FileDataError(
            f"data.path {written!r} is not UTF-8 text{where} ({exc.reason}); save it as UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8)"
        ) from None
    if not rows:
        raise FileDataError(f"data.path {written!r} is empty: it holds no JSON rows")


def _undecodable(path: Path) -> tuple[int, int]:
    """The line and column (1-based, in bytes) of the first byte of ``path`` that is not UTF-8.

    Read again line by line in binary (only once reading as text failed): a UTF-8 character
    never holds a newline byte, so each line decodes on its own."""
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return number, exc.start + 1
    return 0, 0


def _json_row(line: str, number: int, written: str) -> int:
    """1 for a line holding one JSON object, 0 for a blank one; else a :class:`FileDataError`."""
    if not line.strip():
        return 0
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise FileDataError(
            f"data.path {written!r}: line {number} is not valid JSON ({exc.msg} at column "
            f'{exc.colno}); each line must hold one JSON object, e.g. {{"prompt": "...", '
            '"answer": "..."}'
        ) from None
    if not isinstance(row, dict):
        raise FileDataError(
            f"data.path {written!r}: line {number} is a JSON {type(row).__name__}, not an "
            'object; each line must hold one JSON object, e.g. {"prompt": "..."}'
        )
    return 1


__all__ = ["FileDataError", "file_rows"]
