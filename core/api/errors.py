"""The one base class for errors a user can fix: the CLI prints their message, no traceback."""


class RlvrError(Exception):
    """An error whose message says what is wrong and how to fix it."""


class TrainingError(RlvrError, RuntimeError):
    """Training cannot go on (non-finite losses, nothing to train on, a bad resume...)."""


class ConfigWarning(UserWarning):
    """A setting that is accepted but will not do what it seems to (the CLI prints one line)."""
