"""YAML as the config reads it: PyYAML's safe loader, with two changes. A key given twice in one
mapping is an error (YAML requires unique keys; PyYAML keeps the last silently), and an unquoted
number, boolean or date keeps the text it was written as (`Plain`), so that a string setting
gets the text and any other setting the value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class Plain:
    """An unquoted YAML scalar that YAML 1.1 reads as a number, boolean or date, with the text it
    was written as: a string setting takes the text (`name: 010` is "010", not 8; `run_dir:
    2026_12_06` is not 20261206; `tgt_lang: no` is Norwegian), any other setting the value."""

    value: Any
    text: str

    def __repr__(self) -> str:
        return repr(self.value)


def _keeping_text(construct: Any) -> Any:
    def construct_plain(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
        value = construct(loader, node)
        return Plain(value, node.value) if node.style is None else value

    return construct_plain


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, lines: tuple[int, int]) -> None:
        self.key, self.lines = key, lines
        super().__init__(f"duplicate key {key!r}")


class _Loader(yaml.SafeLoader):
    """`yaml.safe_load`'s loader, but a key given twice in one mapping is an error (YAML requires
    unique keys, and PyYAML would quietly keep the last value), and plain numbers, booleans and
    dates keep their text (`Plain`); a key is its text."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}  # key -> its line
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
                continue
            key = _text(self.construct_object(key_node, deep=True))
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    raise DuplicateKey(key, (first[key], line))
            except TypeError:  # unhashable: the constructor's own error follows
                continue
            first[key] = line
        return {_text(k): v for k, v in super().construct_mapping(node, deep).items()}


for _tag in ("int", "float", "bool", "timestamp"):
    _Loader.add_constructor(
        f"tag:yaml.org,2002:{_tag}",
        _keeping_text(_Loader.yaml_constructors[f"tag:yaml.org,2002:{_tag}"]),
    )


def _text(key: Any) -> Any:
    return key.text if isinstance(key, Plain) else key


def parse(text: str) -> Any:
    """YAML text -> Python values, Plain for unquoted numbers, booleans and dates."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader: no arbitrary objects
