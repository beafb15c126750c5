"""Recipes of earlier versions, upgraded to today's keys before they are read.

Models on disk carry the recipe they were trained with, so a key renamed since must still
be read. Every such rename is here, and nowhere else.
"""

from __future__ import annotations

from typing import Any

from mtkit.errors import ConfigError


def _average_from_average_last(k: Any) -> Any:
    """train.average_last: K averaged the last K step checkpoints; 0 or 1 averaged none."""
    return "none" if k in (0, 1) else f"last-{k}"


# (section, old key) -> (today's key, converter of the old value)
RENAMED = {
    ("train", "average_last"): ("average", _average_from_average_last),
}


def upgrade_recipe(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """A copy of the raw recipe with every old key renamed to today's and its value converted.

    A recipe that holds both an old key and its new name is refused: which one is meant?
    """
    raw = dict(raw)
    for (section, old), (new, convert) in RENAMED.items():
        keys = raw.get(section)
        if not isinstance(keys, dict) or old not in keys:
            continue
        if new in keys:
            raise ConfigError(f"{where}: {section}.{old} is the old name of {section}.{new}; "
                              f"keep only {section}.{new}")
        keys = dict(keys)
        keys[new] = convert(keys.pop(old))
        raw[section] = keys
    return raw
