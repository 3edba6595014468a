"""One typed configuration tree: YAML -> dataclasses, dotted overrides, unknown keys rejected.

Every field has a default and a doc comment. Each section lives in a module of its own (data,
model, train, decode, diagnostics: its fields and their checks); convert.py turns plain values
into them, naming the closest valid key when a key is unknown; this module assembles the tree
and loads it. The package imports nothing from the rest of translator but `errors`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from translator.config.checks import data_source, expand_path
from translator.config.convert import build, set_dotted
from translator.config.data import DataConfig
from translator.config.decode import DecodeConfig
from translator.config.diagnostics import DiagnosticsConfig
from translator.config.model import (
    TRAINING_ONLY,
    ModelConfig,
    architecture_changes,
    with_training_settings,
)
from translator.config.train import TrainConfig
from translator.config.yaml_text import DuplicateKey, parse
from translator.errors import TranslatorError

__all__ = [
    "TRAINING_ONLY",
    "Config",
    "DataConfig",
    "DecodeConfig",
    "DiagnosticsConfig",
    "ModelConfig",
    "TrainConfig",
    "architecture_changes",
    "dump",
    "from_dict",
    "load",
    "to_dict",
    "with_training_settings",
]


@dataclass(kw_only=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    """Where the corpus comes from and how it is prepared."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Transformer architecture."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Optimisation and logging."""
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    """Search settings, set with the training config and stored in the checkpoint: validation
    uses them, and eval, translate, serve and score start from them (their flags, such as
    --beam, override them; those commands take no --set)."""
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    """Attention diagnostics: thresholds for `translator attention` and for training's checks, and
    their off switch."""


def load(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (or the defaults when `path` is None) and apply `key.sub=value`
    overrides."""
    raw: dict[str, Any] = {}
    where = "defaults"
    overridden: dict[str, str] = {}  # dotted key -> the --set that gave its value (errors name it)
    if path is not None:
        where = str(path)
        if not Path(path).is_file():
            what = (
                "a directory, not a config file" if Path(path).is_dir() else "config file not found"
            )
            raise TranslatorError(what, where, "give the path to a YAML file")
        try:
            raw = parse(Path(path).read_text(encoding="utf-8")) or {}
        except DuplicateKey as err:
            raise TranslatorError(
                f"key {err.key!r} is given twice (lines {err.lines[0]} and {err.lines[1]})",
                where,
                "keep one of them",
            ) from None
        except yaml.YAMLError as err:
            raise TranslatorError(f"invalid YAML: {err}".replace("\n", " "), where) from None
        except UnicodeDecodeError:
            raise TranslatorError("not a UTF-8 text file", where, "give a YAML config") from None
        if not isinstance(raw, dict):
            raise TranslatorError(
                "top level must be a mapping of sections",
                where,
                "give a YAML config of sections such as data, model, train (see configs/)",
            )
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise TranslatorError(
                f"override {item!r} is not KEY=VALUE", "--set", "e.g. --set train.lr=5e-4"
            )
        try:
            value = parse(text) if text.strip() else ""
        except DuplicateKey as err:
            raise TranslatorError(
                f"key {err.key!r} is given twice", f"--set {item}", "keep one of them"
            ) from None
        except yaml.YAMLError:
            raise TranslatorError(
                f"the value in {item!r} is not valid YAML",
                "--set",
                "quote it, e.g. --set 'data.source=\"a b\"'",
            ) from None
        set_dotted(raw, key.strip(), value, item)
        overridden[key.strip()] = f"--set {item}"
    cfg = build(Config, raw, where, "", overridden)
    # what a user wrote, not what a checkpoint stores (from_dict): that was expanded when written
    cfg.data.data_dir = expand_path(cfg.data.data_dir, "data.data_dir")
    cfg.data.source = data_source(cfg.data.source, "data.source")
    cfg.train.run_dir = expand_path(cfg.train.run_dir, "train.run_dir")
    cfg.train.init_from = expand_path(cfg.train.init_from, "train.init_from")
    cfg.data.spm_model = expand_path(cfg.data.spm_model, "data.spm_model")
    cfg.data.tgt_spm_model = expand_path(cfg.data.tgt_spm_model, "data.tgt_spm_model")
    return cfg


def from_dict(raw: dict[str, Any], where: str = "config") -> Config:
    """Build a checked Config from plain nested dicts (as stored in checkpoints)."""
    return build(Config, raw, where, "", {})


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dicts, ready for YAML or a checkpoint."""
    return dataclasses.asdict(cfg)


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
