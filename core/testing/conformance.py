"""What every conformance check of :mod:`rlvr.testing` shares: the error it raises, finding the
record to check, validating its params, and calling the plugin so that an exception names the
call that raised it."""

from __future__ import annotations

import math
import numbers
import pickle
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.api.host import Host


class ConformanceError(AssertionError):
    """A plugin does not follow rlvr's plugin contract; the message says how."""


def fail(label: str, message: str) -> ConformanceError:
    """The error to raise, its message starting with what was checked (``label``)."""
    return ConformanceError(f"{label}: {message}")


def resolve(kind: str, record_or_name: Any, host: Host | None) -> Any:
    """The record to check: given, or found by name among the installed plugins."""
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.api.host import KINDS, check_record, create_host

    expected = KINDS[kind]
    if isinstance(record_or_name, str):
        host = host if host is not None else create_host()
        try:
            record = host.get(kind, record_or_name)
        except KeyError as exc:
            raise fail(f"check_{kind}({record_or_name!r})", str(exc.args[0])) from None
    elif isinstance(record_or_name, expected):
        record = record_or_name
    else:
        raise TypeError(
            f"check_{kind} takes an rlvr.api.registration.{expected.__name__} or a {kind} name, "
            f"got {record_or_name!r}"
        )
    problem = check_record(record, expected)
    if problem:
        raise fail(f"{kind} {getattr(record, 'name', record)!r}", problem)
    return record


def validated_params(label: str, record: Any, params: Any) -> Any:
    """``params`` as an instance of the record's params model (defaults when None)."""
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from pydantic import BaseModel, ValidationError

    model = record.params
    if isinstance(params, model):
        return params
    if isinstance(params, BaseModel):
        raise TypeError(f"{label}: params is a {type(params).__name__}, expected {model.__name__}")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"{label}: params must be a dict or a {model.__name__}, got {params!r}")
    data = dict(params or {})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        hint = " (its defaults are not valid on their own: pass params=...)" if not data else ""
        message = f"params {data!r} are not valid for {model.__name__}{hint}:\n{exc}"
        raise fail(label, message) from None


_UNKNOWN_KEY = "rlvr_testing_unknown_key"


def check_params_model(label: str, params: Any) -> None:
    """Unknown keys are errors; params pickle and survive a dumped config's round trip."""
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from pydantic import ValidationError

    model = type(params)
    dumped = params.model_dump(mode="json")
    try:
        model.model_validate({**dumped, _UNKNOWN_KEY: 1})
    except ValidationError as exc:
        if not any(err["type"] == "extra_forbidden" for err in exc.errors()):
            raise fail(
                label,
                f"{model.__name__} did not report the unknown key {_UNKNOWN_KEY!r} as unknown "
                "(subclass rlvr.Params, which sets extra='forbid')",
            ) from None
    else:
        raise fail(
            label,
            f"{model.__name__} accepts unknown keys, so a typo in a config goes unnoticed; "
            "subclass rlvr.Params (extra='forbid')",
        )
    try:
        again = model.model_validate(dumped)
    except ValidationError as exc:
        raise fail(
            label,
            f"{model.__name__}.model_dump(mode='json') does not validate again, so a config "
            f"printed by `rlvr validate` would not reload:\n{exc}",
        ) from None
    if again != params:
        raise fail(
            label,
            f"{model.__name__} changes in a JSON round trip ({params!r} -> {again!r}), so a "
            "config printed by `rlvr validate` would not reload as the same run",
        )
    try:
        pickle.loads(pickle.dumps(params))
    except Exception as exc:
        raise fail(label, f"params cannot be pickled ({type(exc).__name__}: {exc})") from None


def finite_number(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (a reward's value, a metric)."""
    return isinstance(value, numbers.Real) and math.isfinite(value)


def call(label: str, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an exception becomes a ConformanceError naming ``what``."""
    try:
        return fn(*args, **kwargs)
    except ConformanceError:
        raise
    except Exception as exc:
        raise fail(label, f"{what} raised {type(exc).__name__}: {exc}") from exc
