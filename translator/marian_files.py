"""The files of a Hugging Face MarianMT directory, each checked where it is read: a damaged or
cut-short download is named in one line (file and fault), never a traceback from deep inside
json, safetensors, torch or protobuf. translator/marian.py maps what they hold onto our model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from translator.data.spm_files import read_model
from translator.errors import TranslatorError

DAMAGED = "download the model again"  # the fix for a file of the download that cannot be read


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object (every file of the model's directory holds one)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TranslatorError(
            "not found",
            str(path),
            "give the directory of a MarianMT model "
            "(config.json, weights, source.spm, target.spm, vocab.json)",
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TranslatorError(f"not valid JSON ({err})", str(path), DAMAGED) from None
    if not isinstance(value, dict):
        raise TranslatorError(f"not a JSON object (a {type(value).__name__})", str(path), DAMAGED)
    return value


def read_vocab(path: Path) -> dict[str, int]:
    """Piece -> Marian id; </s> and <unk> must be there (they are read by name)."""
    vocab = read_json(path)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()):
        raise TranslatorError("not a table of piece -> integer id", str(path), DAMAGED)
    missing = [piece for piece in ("</s>", "<unk>") if piece not in vocab]
    if missing:
        raise TranslatorError(f"no {' or '.join(missing)} entry", str(path), DAMAGED)
    return vocab


def read_spm(path: Path) -> bytes:
    """A SentencePiece model of the download, checked to parse and hold pieces."""
    if not path.is_file():
        raise TranslatorError(
            "not found", str(path), "OPUS-MT models ship source.spm and target.spm"
        )
    return read_model(path, "", DAMAGED)


def read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The state dict of model.safetensors, else of pytorch_model.bin, and the file it came from;
    a damaged file is named."""
    safetensors, pickled = directory / "model.safetensors", directory / "pytorch_model.bin"
    if safetensors.is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = safetensors
        try:
            weights = load_file(path)
        except SafetensorError as err:
            raise TranslatorError(
                f"not a readable safetensors file ({err})", str(path), DAMAGED
            ) from None
    elif pickled.is_file():
        path = pickled
        try:
            weights = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises many kinds for a corrupt file (as in checkpoint)
            raise TranslatorError(
                f"not readable PyTorch weights ({type(err).__name__}: cut short or damaged)",
                str(path),
                DAMAGED,
            ) from None
    else:
        raise TranslatorError(
            "no weights found", str(directory), "expected model.safetensors or pytorch_model.bin"
        )
    if not isinstance(weights, dict) or not all(
        isinstance(v, torch.Tensor) for v in weights.values()
    ):
        raise TranslatorError("not a state dict of tensors", str(path), DAMAGED)
    return weights, path
