"""``check_environment``: an environment plugin driven by scripted assistant messages, without a
model (the checks of ``rlvr env check``, :mod:`rlvr.rollout.envcheck`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlvr.testing.conformance import (
    ConformanceError,
    check_params_model,
    resolve,
    validated_params,
)

if TYPE_CHECKING:
    from rlvr.api.host import Host
    from rlvr.api.registration import Environment
    from rlvr.rollout.envcheck import Transcript


def check_environment(
    record_or_name: Environment | str,
    params: Mapping[str, Any] | Any | None = None,
    *,
    rows: Sequence[Mapping[str, Any]] | None = None,
    script: Sequence[str] | None = None,
    host: Host | None = None,
    timeout: float = 30.0,
) -> list[Transcript]:
    """Check an environment plugin without a model; return the episodes it ran (one per row).

    ``rows`` are the dataset rows episodes start from (default: two rows with ``prompt`` and
    ``answer``, :data:`rlvr.rollout.envcheck.DEFAULT_ROWS`); ``script`` the assistant messages
    sent, one per turn, until the environment says ``done`` (default: text, a call to an
    unknown tool, a malformed call, an answer; tool calls are parsed as ``hermes``). Each
    :class:`~rlvr.rollout.envcheck.Transcript` holds the conversation, the environment's
    rewards and whether it ended (``done``), so a test can assert on them. ``rlvr env check``
    runs the same checks.
    """
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.rollout.envcheck import EnvironmentCheckError, check_episodes

    record = resolve("environment", record_or_name, host)
    label = f"environment {record.name!r}"
    p = validated_params(label, record, params)
    check_params_model(label, p)
    try:
        return check_episodes(record, p, rows=rows, script=script, timeout=timeout)
    except EnvironmentCheckError as exc:
        raise ConformanceError(str(exc)) from None
