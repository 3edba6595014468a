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
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Key:
    name: str  # dotted, as --set takes it: train.lr
    type: str  # the annotation as written in the source
    default: str  # as YAML would read it back
    doc: str


def keys(tree: Any) -> list[Key]:
    """The keys of a config tree (config.Config()), section by section, in source order."""
    found = []
    for section in dataclasses.fields(tree):
        values = getattr(tree, section.name)
        types, docs = _annotations_and_docs(type(values))
        for field in dataclasses.fields(values):
            default = json.dumps(getattr(values, field.name), ensure_ascii=False)
            found.append(
                Key(f"{section.name}.{field.name}", types[field.name], default, docs[field.name])
            )
    return found


def _annotations_and_docs(cls: type) -> tuple[dict[str, str], dict[str, str]]:
    """A dataclass's field annotations, as written, and the docstring after each field."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    types, docs = {}, {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            types[node.target.id] = ast.unparse(node.annotation)
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            docs[node.target.id] = inspect.cleandoc(after.value.value) if is_doc else ""
    return types, docs


def render(found: list[Key]) -> str:
    """`key: type = default`, then the doc indented, a blank line between keys."""
    return "\n\n".join(
        f"{k.name}: {k.type} = {k.default}\n" + textwrap.indent(k.doc, "    ") for k in found
    )
