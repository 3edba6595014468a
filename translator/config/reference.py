"""Every config key with its type, default and doc (`translator keys`).

Types and defaults come from the section dataclasses; the docs from their source, since Python
keeps no attribute docstrings at run time (each field's doc is the string after it).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Key:
    name: str  # dotted, as --set takes it: train.lr
    type: str  # in YAML's words: int, float, one of a, b, ...
    default: str  # as YAML would read it back
    doc: str


def sections(tree: Any) -> list[tuple[str, str, list[Key]]]:
    """(section name, its doc, its keys) of a config tree (config.Config()), in source order."""
    found = []
    section_docs = _docs(type(tree))
    for section in dataclasses.fields(tree):
        values = getattr(tree, section.name)
        hints, docs = typing.get_type_hints(type(values)), _docs(type(values))
        keys = [
            Key(
                f"{section.name}.{field.name}",
                _type_name(hints[field.name]),
                json.dumps(getattr(values, field.name), ensure_ascii=False),
                docs[field.name],
            )
            for field in dataclasses.fields(values)
        ]
        found.append((section.name, section_docs[section.name], keys))
    return found


def matching(key: Key, text: str) -> bool:
    """Does `key` answer a search for `text`: its name, type or doc holds it, or text is what
    --set takes (`train.lr=5e-4`; `data.splits.valid=dev`, an entry of a mapping)?"""
    wanted = text.split("=", 1)[0].strip().lower()
    name, mapping = key.name.lower(), key.type.startswith("mapping")
    entry_of = wanted.rsplit(".", 1)[0]  # data.splits of data.splits.valid
    return any(wanted in part for part in (name, key.type.lower(), key.doc.lower())) or (
        mapping and "." in wanted and name.endswith(entry_of)
    )


def render(found: list[tuple[str, str, list[Key]]]) -> str:
    """Each section with keys to show: `[section]` and its doc, then `key: type = default` and
    the key's doc indented; a blank line between entries."""
    blocks = []
    for section, doc, keys in found:
        if keys:
            blocks.append(textwrap.fill(f"[{section}] {doc}", width=96))
            blocks += [
                f"{k.name}: {k.type} = {k.default}\n" + textwrap.indent(k.doc, "    ") for k in keys
            ]
    return "\n\n".join(blocks)


def _docs(cls: type) -> dict[str, str]:
    """The docstring after each field of a dataclass, by field name ("" for none)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            docs[node.target.id] = inspect.cleandoc(after.value.value) if is_doc else ""
    return docs


def _type_name(hint: Any) -> str:
    """A field's type as a YAML writer reads it: `one of unigram, bpe`, `int or null`."""
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(json.dumps(a) if a == "" else str(a) for a in hint.__args__)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is list:
        return "list of " + _type_name(typing.get_args(hint)[0])
    if typing.get_origin(hint) is dict:
        return "mapping of " + " to ".join(_type_name(a) for a in typing.get_args(hint))
    return getattr(hint, "__name__", str(hint))
