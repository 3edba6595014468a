"""The files of a Hugging Face MarianMT directory, each checked where it is read: a damaged or
cut-short download is named in one line (file and fault), never a traceback from deep inside
json, safetensors, torch or protobuf. translator/marian.py maps what they hold onto our model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from translator.data.corpus import env_on
from translator.data.spm_files import read_model
from translator.errors import TranslatorError

DAMAGED = "download the model again"  # the fix for a file of the download that cannot be read
HUB_PREFIX = "hf:"  # as --data hf:NAME: a name on the Hugging Face hub, not a local path
# what import_marian reads of a hub model (its repository may hold other frameworks' weights too)
MODEL_FILES = [
    *("config.json", "tokenizer_config.json", "vocab.json", "target_vocab.json"),
    *("source.spm", "target.spm"),
]
DIRECTORY_FILES = "config.json, weights, source.spm, target.spm, vocab.json"
# `owner/name` or the model's page: what a Hugging Face user may type for a hub model
HUB_NAME = re.compile(r"(?:https?://huggingface\.co/)?([\w.-]+/[\w.-]+)/?")


def model_directory(source: str | Path) -> Path:
    """The directory of a MarianMT model: `source` itself, or for `hf:NAME` the hub model's files
    (downloaded, or found in the Hugging Face cache)."""
    text = str(source)
    if text.startswith(HUB_PREFIX):
        return download(text.removeprefix(HUB_PREFIX), text)
    directory = Path(source)
    if directory.is_file():
        raise TranslatorError(
            "is a file, not a model directory",
            text,
            "give the directory the MarianMT model was saved to, with config.json and weights",
        )
    if not directory.exists():
        hub = HUB_NAME.fullmatch(text)
        fix = (
            f"for the Hugging Face hub's model give hf:{hub.group(1)}; downloading needs internet"
            if hub
            else f"give the directory of a MarianMT model: {DIRECTORY_FILES}"
        )
        raise TranslatorError("no such directory", text, fix)
    return directory


def download(repo: str, source: str) -> Path:
    """The files of hub model `repo` that an import reads, in the Hugging Face cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import logging as hub_logging

    # its per-retry warnings would bury the one line below when the hub cannot be reached
    hub_logging.set_verbosity_error()
    try:
        folder = snapshot_download(repo, allow_patterns=[*MODEL_FILES, "model.safetensors"])
        if not (Path(folder) / "model.safetensors").is_file():  # older uploads: the pickle alone
            folder = snapshot_download(repo, allow_patterns=[*MODEL_FILES, "pytorch_model.bin"])
    except Exception as err:  # noqa: BLE001 - any failure to download gets the same advice
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        fix = "a hub model needs internet; offline, give the directory of a downloaded one"
        if env_on("HF_HUB_OFFLINE"):  # the hub may well be reachable: the environment forbids it
            fix = "HF_HUB_OFFLINE is set: unset it to download, or give a local directory"
        raise TranslatorError(f"cannot download hub model {repo!r}: {first}", source, fix) from None
    return Path(folder)


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
            f"give the directory of a MarianMT model: {DIRECTORY_FILES}",
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
