"""Checks the config sections run on their values."""

from __future__ import annotations

import math
import os
import re
from typing import Any

from translator.errors import TranslatorError


def check_range(
    section: str,
    obj: Any,
    names: str,
    low: float,
    high: float | None = None,
    high_open: bool = False,
) -> None:
    """Each field in `names` (space-separated) must be a finite number >= low and <= high (< high if
    high_open)."""
    for name in names.split():
        value = getattr(obj, name)
        if (
            math.isfinite(value)
            and value >= low
            and (high is None or (value < high if high_open else value <= high))
        ):
            continue
        rule = (
            f"in [{low}, {high}{')' if high_open else ']'}"
            if high is not None
            else f"of at least {low} (finite)"
            if low > -math.inf
            else "that is a finite number"
        )
        raise TranslatorError(
            f"{name}={value} is out of range", f"{section}.{name}", f"use a value {rule}"
        )


def expand_path(value: str, key: str) -> str:
    """A path setting with `~` and `$NAME` expanded, as a shell would: YAML files and `--set`
    values reach us unexpanded, and a literal `~` would become a directory of that name here."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    unset = re.search(r"\$\{?[A-Za-z_]\w*\}?", expanded)  # `$5`, `$` alone: not names
    if unset:
        raise TranslatorError(
            f"{value!r} names {unset[0]}, which is not set", key, "set it, or write the path out"
        )
    return expanded


def data_source(value: str, key: str) -> str:
    """A data source as given (data.source, --data): `hf:NAME[:CONFIG]` as it is, a path expanded
    (expand_path); an empty one, or hf: without a name, refused."""
    if value.startswith("hf:"):
        if not value[3:].split(":")[0].strip():
            raise TranslatorError(
                f"{value!r} names no dataset", key, "give hf:NAME[:CONFIG], e.g. hf:wmt14:de-en"
            )
        return value
    if not value.strip():
        raise TranslatorError(
            "an empty data source", key, "give a directory of the data's files or hf:NAME"
        )
    return expand_path(value, key)
