"""``check_data_source``: a data source plugin's rows, split by split, as a run and a resumed run
load them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlvr.api.errors import RlvrError
from rlvr.testing.conformance import check_params_model, fail, resolve, validated_params

if TYPE_CHECKING:
    from rlvr.api.host import PluginHost
    from rlvr.api.registration import DataSource

#: a split no source has: asking for it must give rows or one error line, not a traceback
NO_SUCH_SPLIT = "rlvr-testing-no-such-split"


def check_data_source(
    record_or_name: DataSource | str,
    params: Mapping[str, Any] | Any | None = None,
    *,
    splits: Sequence[str] = ("train", "test"),
    prompt_field: str = "prompt",
    host: PluginHost | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Check a data source plugin; return the rows of each split in ``splits``.

    The params model rejects unknown keys and survives a dumped config's round trip; each split
    (``train`` and ``test``, what ``data.split`` and ``data.eval_split`` default to) holds rows,
    each a mapping whose ``prompt_field`` is text or a list of ``{role, content}`` messages;
    loading a split again gives the same rows (a resumed run loads them again and must find
    the ones it trained on); the first two splits share no prompt (the eval is held out); and
    a split the source does not have gives rows or an :class:`rlvr.RlvrError` (one ``error:``
    line for the user), not another exception.
    """
    # loads pydantic: not when pytest loads rlvr.testing (see its __init__)
    from rlvr.data.prompts import DataError, dataset_rows, field_problems

    record = resolve("data_source", record_or_name, host)
    label = f"data source {record.name!r}"
    p = validated_params(label, record, params)
    check_params_model(label, p)

    def load(split: str) -> list[dict[str, Any]]:
        try:
            got = record.factory(p, split)
        except RlvrError as exc:
            raise fail(label, f"split {split!r}: {exc}") from None
        except Exception as exc:
            raise fail(
                label,
                f"split {split!r} raised {type(exc).__name__}: {exc} (raise rlvr.RlvrError "
                "with a message that says what to fix: the user sees it as one error line)",
            ) from exc
        try:
            return dataset_rows(got, what=f"split {split!r}")
        except DataError as exc:
            raise fail(label, f"{exc} (a split is a list of dicts or a datasets.Dataset)") from None

    out: dict[str, list[dict[str, Any]]] = {}
    for split in splits:
        rows = load(split)
        problems = field_problems(rows, (), host, prompt_field=prompt_field)
        if problems:
            raise fail(label, f"split {split!r}: {problems[0][1]}")
        again = load(split)
        if again != rows:
            pairs = zip(rows, again, strict=False)
            i = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(rows), len(again)))
            raise fail(
                label,
                f"split {split!r} gave other rows when loaded again ({len(rows)} then "
                f"{len(again)} rows, first difference at row {i}): a resumed run loads its "
                "rows again and must find the ones it trained on; seed what is random from "
                "the params",
            )
        out[split] = rows
    if len(splits) >= 2:
        train, held = (out[s] for s in splits[:2])
        seen = {_key(r.get(prompt_field)) for r in train}
        shared = [i for i, r in enumerate(held) if _key(r.get(prompt_field)) in seen]
        if shared:
            raise fail(
                label,
                f"{len(shared)} of the {len(held)} prompts of split {splits[1]!r} are also in "
                f"split {splits[0]!r} (row {shared[0]}: {str(held[shared[0]][prompt_field])[:60]!r}"
                "): an eval on them measures memory, not skill; keep the held-out rows apart",
            )
    try:
        record.factory(p, NO_SUCH_SPLIT)
    except RlvrError:
        pass
    except Exception as exc:
        raise fail(
            label,
            f"an unknown split ({NO_SUCH_SPLIT!r}) raised {type(exc).__name__}: {exc}; raise "
            "rlvr.RlvrError naming the splits there are (a typo in data.split or "
            "data.eval_split is then one error line)",
        ) from exc
    return out


def _key(prompt: Any) -> str:
    """A prompt as comparable text (messages as their JSON)."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


__all__ = ["NO_SUCH_SPLIT", "check_data_source"]
