"""The files of a fairseq model, each checked where it is read: the checkpoint (a pickle of the
weights and the training settings) and the dictionaries fairseq-preprocess wrote. A damaged or
foreign file is named in one line; translator/fairseq.py maps what they hold onto our model."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

import torch

from translator.errors import TranslatorError

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's ids 0-3
DICT_FIX = "give the dict file fairseq-preprocess wrote"


class _Stub:
    """Stands in for a class of a module that is not installed (fairseq's own, in a pickle);
    keeps what the pickle gives it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _LenientUnpickler(pickle.Unpickler):
    """An unpickler that gives a _Stub class for a class it cannot import."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ModuleNotFoundError, AttributeError):
            return type(name, (_Stub,), {})


class _Lenient:
    """A pickle module for torch.load whose unpickler stubs missing classes."""

    Unpickler = _LenientUnpickler

    @staticmethod
    def load(file, encoding: str = "utf-8"):  # how torch.load reads a legacy file's header
        return _LenientUnpickler(file, encoding=encoding).load()


def read_checkpoint(path: Path) -> dict[str, Any]:
    """{"settings": the model's training settings as a dict, "weights": the state dict}.

    A fairseq checkpoint is a pickle, and unpickling runs code of the file's choosing: import only
    files you trust. Classes of fairseq itself (not installed here) are stubbed."""
    if not path.is_file():
        what = "a directory, not a checkpoint file" if path.is_dir() else "not found"
        raise TranslatorError(what, str(path), "give the .pt file fairseq-train wrote")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_Lenient)
    except Exception as err:  # a damaged file fails anywhere inside pickle or zip
        raise TranslatorError(
            f"not a readable checkpoint ({type(err).__name__}: cut short, damaged or not PyTorch)",
            str(path),
            "give the .pt file fairseq-train wrote",
        ) from None
    if isinstance(payload, dict) and {"config", "tokenizer"} <= payload.keys():
        raise TranslatorError(
            "is a translator checkpoint already, not fairseq's",
            str(path),
            "translate, evaluate or fine-tune it as it is",
        )
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), dict):
        raise TranslatorError(
            "holds no model weights (no 'model' entry)", str(path), "is it a fairseq checkpoint?"
        )
    settings = _as_dict(payload.get("args"))
    cfg = payload.get("cfg")
    if cfg is not None:
        cfg = _as_dict(cfg)
        settings = {**_as_dict(cfg.get("task")), **settings, **_as_dict(cfg.get("model"))}
    return {"settings": settings, "weights": payload["model"]}


def _as_dict(value: Any) -> dict[str, Any]:
    """Settings as fairseq saved them: an argparse Namespace (older), a dict (its cfg, which
    fairseq saves as plain containers), or None."""
    if value is None:
        return {}
    if isinstance(value, argparse.Namespace):
        return vars(value)
    if isinstance(value, dict):
        return value
    if hasattr(value, "items"):  # an omegaconf DictConfig, where omegaconf is installed
        return dict(value.items())
    return {}


def read_dictionary(path: Path) -> list[str]:
    """fairseq's symbols of one side, one per row in id order: <s>, <pad>, </s>, <unk>, then the
    file's, as fairseq's Dictionary reads it (a symbol given twice is refused, unless its line
    ends in `#fairseq:overwrite`: it then takes a new row, and lookups find that one)."""
    if not path.is_file():
        raise TranslatorError(
            "not found",
            str(path),
            "give the directory fairseq-preprocess wrote (--destdir), with dict.SRC.txt and "
            "dict.TGT.txt",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise TranslatorError(f"line {line} is not UTF-8", str(path), DICT_FIX) from None
    symbols, seen = list(SPECIALS), set(SPECIALS)
    for number, line in enumerate(text.splitlines(), 1):
        overwrite = line.endswith(" #fairseq:overwrite")
        symbol, _, count = line.removesuffix(" #fairseq:overwrite").rpartition(" ")
        if not symbol or not count.lstrip("-").isdigit():
            raise TranslatorError(f"line {number} is not 'SYMBOL COUNT'", str(path), DICT_FIX)
        if symbol in seen and not overwrite:
            raise TranslatorError(
                f"line {number}: {symbol!r} is given twice (fairseq refuses it too)",
                str(path),
                DICT_FIX,
            )
        symbols.append(symbol)
        seen.add(symbol)
    return symbols
