"""YAML text read with bounds: what a config file and a ``--set`` value are parsed with.

``yaml.safe_load`` builds aliases (``*name``) by reference, so a few lines of anchors that
refer to each other (an "alias bomb": nine aliases of nine aliases, eight levels deep) parse in
a millisecond into a value that is billions of items once anything walks or copies it; the
config's validation, its dump and the chat template then stall for minutes and take gigabytes.
:func:`load_yaml` counts the values the document expands to before building it and refuses one
whose aliases make it larger than :data:`MAX_EXPANDED_VALUES`, or that refers to itself.
Everything else PyYAML or Python refuses (a control character, a ``!!python/...`` tag, an
integer of more than 4,300 digits, a date that does not exist) becomes a :class:`YamlTextError`
with PyYAML's or Python's own words.
"""

from __future__ import annotations

from typing import Any

import yaml

#: The most values (scalars, lists and mappings, each counted once per place it appears) that
#: a document may expand to through its aliases. A config without aliases is never refused,
#: however large; one whose aliases reach this is not a config.
MAX_EXPANDED_VALUES = 100_000


class YamlTextError(ValueError):
    """YAML text that cannot be read; the message says why (without a file name)."""


def load_yaml(text: str) -> Any:
    """The value of YAML ``text`` (``None`` for an empty document), as ``yaml.safe_load``
    reads it; raises :class:`YamlTextError` for text it refuses or that is an alias bomb."""
    try:
        loader = yaml.SafeLoader(text)  # refuses a control character here
    except yaml.YAMLError as exc:
        raise YamlTextError(str(exc)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YamlTextError(str(exc)) from None
    except RecursionError:
        raise YamlTextError("the document is nested too deeply to read") from None
    except YamlTextError:
        raise
    except ValueError as exc:  # int(): over 4,300 digits; a timestamp that does not exist
        if "integer string conversion" in str(exc):
            raise YamlTextError(
                "an integer has more digits than Python reads (4,300); quote it to give it as text"
            ) from None
        raise YamlTextError(f"a value cannot be read: {exc}") from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose aliases expand it past :data:`MAX_EXPANDED_VALUES` values or
    into a cycle. Each distinct node is visited once (its expanded size is remembered), so
    the check costs what the text does, not what the expansion would."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    distinct = 0

    def size(node: yaml.Node) -> int:
        nonlocal distinct
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise YamlTextError(
                "an alias (*name) refers to the value that contains it, which would make it "
                "endless; write the value out instead"
            )
        open_nodes.add(key)
        distinct += 1
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_VALUES and total > distinct:  # aliases make it this big
            raise YamlTextError(
                f"its aliases (*name) expand to more than {MAX_EXPANDED_VALUES:,} values "
                f"(from {distinct:,} written), which no config needs (an alias bomb?); write "
                "the repeated values out, or refer to them fewer times"
            )
        return total

    size(root)


__all__ = ["MAX_EXPANDED_VALUES", "YamlTextError", "load_yaml"]
