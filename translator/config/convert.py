"""Plain values (YAML, --set, checkpoint dicts) -> checked dataclasses: the types, the names."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal

from translator.config.yaml_text import Plain
from translator.errors import TranslatorError

# YAML 1.1's other booleans: quoted, they still give a boolean setting its truth value
YAML11_BOOLS = {"yes": True, "on": True, "no": False, "off": False}


def set_dotted(raw: dict[str, Any], key: str, value: Any, item: str) -> None:
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise TranslatorError(f"{part!r} is not a section", f"--set {item}")
    node[leaf] = value


def build(cls: type, raw: Any, where: str, prefix: str, overridden: dict[str, str]) -> Any:
    if not isinstance(raw, dict):
        section = prefix.rstrip(".") or "config"
        raise TranslatorError(f"{section} must be a mapping of keys to values", where)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            fix = (
                f"did you mean {prefix}{close[0]}?" if close else "valid keys: " + ", ".join(fields)
            )
            # a --set that made it (`traing.lr=1` makes section traing), else the file
            named = [w for k, w in overridden.items() if f"{k}.".startswith(f"{dotted}.")]
            raise TranslatorError(f"unknown key {dotted!r}", (named or [where])[0], fix)
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = build(hint, value, where, f"{dotted}.", overridden)
        else:
            values[key] = convert(value, hint, dotted, overridden.get(dotted, where), overridden)
            if isinstance(values[key], dict):  # a mapping adds to (and overrides) its defaults
                values[key] = {**fields[key].default_factory(), **values[key]}
    return cls(**values)


def convert(value: Any, hint: Any, key: str, where: str, overridden: dict[str, str]) -> Any:
    """`value` as type `hint`; errors name `where` (the file, or the --set that gave the value; an
    item of a mapping may have a --set of its own)."""
    if isinstance(value, Plain):  # a string setting takes the text as written
        value = value.text if hint is str else value.value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        if value in args:
            return value
        raise TranslatorError(f"{key}={value!r} is not one of {', '.join(map(str, args))}", where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = next(a for a in args if a is not type(None))
        return convert(value, inner, key, where, overridden)
    if origin is dict:
        if not isinstance(value, dict):
            raise TranslatorError(f"{key} expects a mapping, got {value!r}", where)
        return {
            str(k): convert(
                v, args[1], f"{key}.{k}", overridden.get(f"{key}.{k}", where), overridden
            )
            for k, v in value.items()
        }
    if origin is list:
        if not isinstance(value, list):
            raise TranslatorError(
                f"{key} expects a list, got {value!r}", where, "write one as [a, b] (YAML)"
            )
        return [convert(v, args[0], f"{key}[{i}]", where, overridden) for i, v in enumerate(value)]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads `5e-4` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint is str and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # from plain dicts (YAML's numbers arrive as Plain)
    if hint is bool and isinstance(value, str) and value.lower() in YAML11_BOOLS:
        return YAML11_BOOLS[value.lower()]
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise TranslatorError(f"{key} expects {hint.__name__}, got {value!r}", where)
