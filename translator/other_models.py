"""Other toolkits' models where one of ours is read (`info`, `translate`, `train.init_from`):
named as what they are, with the command that imports them, instead of "damaged" or "foreign".

What is recognised: a fairseq checkpoint (its pickle names a fairseq class, or the argparse
Namespace fairseq keeps its settings in), a bare state dict (Hugging Face's pytorch_model.bin),
a Hugging Face model directory or its config.json (or `hf:NAME`), and a CTranslate2 export.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from translator.errors import TranslatorError

FAIRSEQ = "a fairseq checkpoint, not a translator one"
IMPORT_FAIRSEQ = "import it first: translator import-fairseq CKPT --dicts DIR --spm MODEL -o OUT"

# a pickle's GLOBAL opcode naming a class of fairseq's, or the argparse Namespace that fairseq's
# checkpoints keep their settings in (not the text "fairseq" an imported checkpoint of ours holds)
FAIRSEQ_CLASS = re.compile(rb"c(?:fairseq(?:\.\w+)*|argparse)\n\w+\n")


def pickles_fairseq_settings(path: Path) -> bool:
    """Whether the file's pickle (read as bytes, nothing unpickled) names a class of FAIRSEQ_CLASS.
    OpenNMT-py keeps a Namespace too, beside its own (`onmt`) classes: that is not fairseq."""
    with open(path, "rb") as file:
        head = file.read(1 << 20)  # the pickle comes first (data.pkl, a zip's first entry)
    return b"conmt" not in head and FAIRSEQ_CLASS.search(head) is not None


def refuse_other_payload(payload: Any, path: Path) -> None:
    """A torch.load-ed file that is not ours but another toolkit's: a fairseq checkpoint (model
    weights beside its settings), or weights alone."""
    if not isinstance(payload, dict):
        return
    if "model" in payload and {"args", "cfg"} & payload.keys():
        raise TranslatorError(FAIRSEQ, str(path), IMPORT_FAIRSEQ)
    if payload and all(map(torch.is_tensor, payload.values())):
        raise TranslatorError(
            "weights alone (a state dict, as Hugging Face's pytorch_model.bin), not a "
            "translator checkpoint",
            str(path),
            "import the model they belong to; MarianMT: `translator import-hf DIRECTORY`",
        )


def is_hugging_face_model(given: str) -> bool:
    """A Hugging Face model directory (config.json, and not a CTranslate2 export's model.bin
    beside it), or a hub name as `hf:NAME`."""
    folder = Path(given)
    hf_files = (folder / "config.json").is_file() and not (folder / "model.bin").is_file()
    return hf_files or given.startswith("hf:")


def is_ctranslate2_model(path: Path) -> bool:
    """A CTranslate2 model directory (`translator export`'s output)."""
    return path.is_dir() and (path / "model.bin").is_file()


def refuse_model_directory(path: Path) -> None:
    """A model directory (Hugging Face's, a CTranslate2 export) or a Hugging Face config.json,
    named as what it is: neither a config of ours nor a checkpoint."""
    hf_config = path / "config.json" if path.is_dir() else path
    if hf_config.name == "config.json" and hf_config.is_file():
        try:
            hf = json.loads(hf_config.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            hf = None
        if isinstance(hf, dict) and "model_type" in hf and not (path / "model.bin").is_file():
            raise TranslatorError(
                f"a Hugging Face model ({hf['model_type']}), not a translator config or checkpoint",
                str(path),
                "import a MarianMT one first: translator import-hf DIR -o CKPT, then info CKPT",
            )
    if is_ctranslate2_model(path):
        raise TranslatorError(
            "a CTranslate2 model directory, not a translator config or checkpoint",
            str(path),
            "give the checkpoint it was exported from",
        )
