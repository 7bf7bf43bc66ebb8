"""What the built-in loggers share: the run's name, and the id file that makes ``--resume``
continue the same run in the logger instead of starting a second one."""

from __future__ import annotations

from pathlib import Path


class Logger:
    """A logger of one run's metrics; subclasses write ``on_log``'s ``scalars``."""

    #: the file in the output directory holding the logger's run id (``--resume`` reads it)
    id_file = ""

    def __init__(self, params: object, run: object) -> None:
        self.params = params

    def run_name(self, output_dir: Path) -> str:
        return getattr(self.params, "name", None) or Path(output_dir).name

    def saved_id(self, output_dir: Path, start_step: int) -> str | None:
        """The id an earlier session of this run recorded, when it resumes."""
        path = Path(output_dir) / self.id_file
        return path.read_text().strip() or None if start_step > 0 and path.is_file() else None

    def save_id(self, output_dir: Path, run_id: str) -> None:
        (Path(output_dir) / self.id_file).write_text(run_id)
