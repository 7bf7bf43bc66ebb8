"""Integrations with other libraries, kept out of core: each subpackage holds everything one
library's compatibility needs (today :mod:`rlvr.compat.trl`). Core reaches them at declared call
sites only (the layer contract in pyproject.toml lists them)."""
