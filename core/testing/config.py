"""``validate_config``: a plugin's tests validate a config dict as ``rlvr validate`` does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.api.host import Host


def validate_config(
    data: Mapping[str, Any], *, host: Host | None = None, require: tuple[str, ...] = ()
) -> Any:
    """Validate a config dict against the installed plugins (or ``host``); return the
    ``RunConfig``. Raises :class:`rlvr.config.schema.ConfigError` listing every problem.

    ``require`` names sections that must be present (``rlvr train`` requires
    ``("model", "data", "rewards", "algorithm", "backend")`` and fills in the default
    algorithm and backend).
    """
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.api.host import create_host
    from rlvr.config.schema import validate

    return validate(dict(data), host or create_host(), require=require)
