"""Checkpoints: model, optimizer and training state, the resolved config and the tokenizer itself.

A checkpoint embeds the SentencePiece model bytes, so `translate CKPT` and `eval CKPT` need
neither the YAML nor the prepared data directory. Saving is atomic (temporary file, then rename,
after an fsync). Format 3 stores a sha256 of each part (weights, config, tokenizer, training state
with the optimizer's moments and the RNG states), which `read` verifies: a file damaged after it
was written is refused, naming the part. Format 2 (written before) has a sha256 of its weights
only: those and its tokenizer are verified, the rest cannot be. Format 1 (no checksum) still
loads, unverified but for its tokenizer.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Any

import torch

from translator import other_models
from translator.config import Config, from_dict, to_dict
from translator.data.tokenizer import Tokenizer, proto_checksum
from translator.errors import TranslatorError
from translator.files import atomic_write
from translator.model.transformer import Transformer
from translator.versions import made_by

FORMAT = 3  # 3: "sha256" of each part; 2: "weights_sha256" of the weights alone
FORMATS = (1, 2, 3)  # what `read` accepts
NEWER = "written by a newer translator"  # how `read` refuses a format above FORMAT
# the parts that format 3's checksums cover, by the name an error gives them
PARTS = {
    "model": "weights",
    "config": "config",
    "tokenizer": "tokenizer",
    "state": "training state (optimizer, counters, RNG states)",
}


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    """sha256 over each tensor's name, dtype, shape and bytes, in order: a byte flipped anywhere
    changes it."""
    digest = hashlib.sha256()
    for name, tensor in weights.items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        # the raw bytes, bf16 included (numpy has no bf16)
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def digest(value: Any) -> str:
    """sha256 of a checkpoint part: each tensor's dtype, shape and bytes and each other value's
    type and repr, nested dicts, lists and tuples in order: a byte flipped anywhere changes it."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        digest.update(weights_digest({"": value}).encode())
    elif isinstance(value, dict):
        digest.update(f"dict:{len(value)};".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, list | tuple):
        digest.update(f"{type(value).__name__}:{len(value)};".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, bytes):
        digest.update(f"bytes:{len(value)};".encode() + value)
    else:  # str, int, float, bool, None: what weights_only loads back as it was saved
        text = repr(value)
        digest.update(f"{type(value).__name__}:{len(text)}:{text};".encode())


def seal(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` as format 3: with the checksum of each of its PARTS."""
    payload.pop("weights_sha256", None)
    payload.update(format=FORMAT, sha256={part: digest(payload[part]) for part in PARTS})
    return payload


def save(
    path: str | Path,
    model: torch.nn.Module,
    cfg: Config,
    tokenizer: Tokenizer,
    state: dict[str, Any] | None = None,
    *,
    follow_link: bool = True,
) -> None:
    """Write model weights, config, tokenizer and any training `state` (optimizer, step, RNG...).
    `follow_link`: see files.atomic_write (False for a name training picks in its run directory)."""
    weights = model.state_dict()
    _refuse_converted(weights, cfg, str(path))
    payload = {
        "model": weights,
        "config": to_dict(cfg),
        "tokenizer": {
            "proto": tokenizer.proto(),
            "sha256": tokenizer.checksum(),
            **({} if tokenizer.joint else {"target_proto": tokenizer.target_proto()}),
        },
        "state": state or {},
        "made_by": made_by(),  # outside the checksums: a record, not something read back
    }
    with atomic_write(path, "wb", follow_link=follow_link) as handle:
        torch.save(seal(payload), handle)


def _refuse_converted(weights: dict[str, torch.Tensor], cfg: Config, path: str) -> None:
    """Weights under other names than `cfg.model` builds: a model converted for CPU decoding
    (packed or int8 linears, model/inference.py), which would save a file no load can read."""
    with torch.device("meta"):  # the names alone, nothing allocated
        names = Transformer(cfg.model).state_dict().keys()
    if weights.keys() != names:
        raise TranslatorError(
            "the model is converted for decoding (loading.load on the CPU packs its weights): "
            "the file would hold weights that its config cannot load",
            path,
            "save the plain model: checkpoint.load(CKPT) gives it",
        )


def imported_data_name(out: str | Path) -> str:
    """The data.name an imported checkpoint `out` records: one of its own, as it has no prepared
    data, so that `eval --split` refuses it instead of scoring another corpus (the default
    name's, multi30k) that happens to be prepared here."""
    return f"imported-{Path(out).stem}"


def refuse_replacing_another_kind(path: str | Path) -> None:
    """A command's checkpoint output (-o) that names a file of another kind, a text file a slip
    of the keyboard picked, is refused before any work: writing would replace it."""
    path = Path(path)
    if path.is_file() and path.stat().st_size and not zipfile.is_zipfile(path):
        raise TranslatorError(
            "exists and is not a checkpoint: writing one there would replace it",
            str(path),
            "give a new path, or remove that file first",
        )


def read(path: str | Path) -> dict[str, Any]:
    """The raw checkpoint dictionary, verified (all of it from format 3, the weights and tokenizer
    of format 2); a missing, empty, cut-short, foreign or damaged file is refused in one line,
    naming the damaged part, before anything is built from it."""
    payload = _open(path, mmap=False)
    _check_tokenizer(payload, path)
    if payload["format"] == 2:
        damaged = ["model"] * (weights_digest(payload["model"]) != payload.get("weights_sha256"))
    elif payload["format"] >= 3:
        sums = payload.get("sha256") or {}
        damaged = [part for part in PARTS if digest(payload.get(part)) != sums.get(part)]
    else:
        damaged = []
    if damaged:
        raise TranslatorError(
            f"its {', '.join(PARTS[p] for p in damaged)} "
            f"{'do' if len(damaged) > 1 or damaged == ['model'] else 'does'} not match the "
            "checkpoint's checksum "
            "(the file is damaged)",
            str(path),
            elsewhere(path),
        )
    # training never saves such weights; an edited or foreign file could, and the CPU's fused
    # ReLU linears would hide a NaN that the plain model spreads
    weights = (payload.get("model") or {}).items()  # format 1 files may hold only a config
    bad = next((n for n, t in weights if t.is_floating_point() and not t.isfinite().all()), None)
    if bad is not None:
        raise TranslatorError(
            f"its weights are not finite ({bad} holds NaN or inf)", str(path), elsewhere(path)
        )
    return payload


def same_model(a: str | Path, b: str | Path) -> bool:
    """Do two checkpoints hold the same weights and config, by the checksums format 3 stores?
    Then they translate alike. Not verified here (decoding either verifies it); a file that
    cannot be read counts as different, so that decoding it says what is wrong."""
    try:
        sums = [_open(path, mmap=True).get("sha256") or {} for path in (a, b)]
    except TranslatorError:
        return False
    first, second = sums
    return all(
        first.get(p) is not None and first.get(p) == second.get(p) for p in ("model", "config")
    )


def _check_tokenizer(payload: dict[str, Any], path: str | Path) -> None:
    """The SentencePiece model bytes against their stored sha256 (proto_checksum): a flipped
    byte there changes every translation silently."""
    saved = payload.get("tokenizer", {})
    checksum = proto_checksum(saved.get("proto", b""), saved.get("target_proto"))
    if "sha256" in saved and checksum != saved["sha256"]:
        raise TranslatorError(
            "its tokenizer (SentencePiece model) does not match its checksum (the file is damaged)",
            str(path),
            elsewhere(path),
        )


def elsewhere(path: str | Path) -> str:
    """What to use instead of a damaged `path`: last.pt, best.pt and the newest step-N.pt of a run
    are one file (hard links), so another name of it shares the damage."""
    apart, linked = separate_checkpoints(path)
    if apart:
        return f"use another checkpoint, e.g. {apart[0]} (a file of its own)"
    if linked:
        return f"use another checkpoint: its hard links ({', '.join(linked)}) share the damage"
    return "use another checkpoint"


def separate_checkpoints(path: str | Path) -> tuple[list[str], list[str]]:
    """The run's other checkpoints beside `path` (newest step-N.pt first, then best.pt and
    last.pt): those that are files of their own, and those that are hard links of it."""
    path = Path(path)
    try:
        here = path.stat()
    except OSError:
        return [], []
    apart, linked = [], []
    run = path.parent
    for other in [*reversed(step_files(run)), run / "best.pt", run / "last.pt"]:
        if other.name == path.name or not other.is_file():
            continue
        same = (other.stat().st_dev, other.stat().st_ino) == (here.st_dev, here.st_ino)
        (linked if same else apart).append(other.name)
    return apart, linked


def read_tokenizer(path: str | Path) -> tuple[Tokenizer, dict[str, Any]]:
    """A checkpoint's tokenizer and config dict, its weights left unread (memory-mapped,
    unverified): what `prepare` needs of train.init_from, cheap even for a large checkpoint."""
    payload = _open(path, mmap=True)
    _check_tokenizer(payload, path)
    saved = payload["tokenizer"]
    return Tokenizer.from_proto(saved["proto"], saved.get("target_proto")), payload["config"]


def _open(path: str | Path, mmap: bool) -> dict[str, Any]:
    """torch.load of a file that must be a translator checkpoint (format checked, weights not)."""
    given, path = str(path), Path(path)
    if not path.is_file():
        what = "a directory, not a checkpoint" if path.is_dir() else "checkpoint not found"
        fix = "give a .pt file written by `translator train`, e.g. RUN_DIR/best.pt"
        if other_models.is_hugging_face_model(given):
            fix = f"import it first: translator import-hf {given} -o CKPT, then give CKPT"
        elif other_models.is_ctranslate2_model(path):
            what = "a CTranslate2 model directory, not a checkpoint"
            fix = "give the checkpoint it was exported from"
        raise TranslatorError(what, given, fix)
    if path.stat().st_size == 0:
        raise TranslatorError(
            "empty checkpoint file (0 bytes)", str(path), "use another checkpoint"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch raises many kinds for a corrupt file
        if other_models.pickles_fairseq_settings(path):  # refused by weights_only, not damaged
            raise TranslatorError(
                other_models.FAIRSEQ, str(path), other_models.IMPORT_FAIRSEQ
            ) from None
        raise TranslatorError(
            f"not a readable checkpoint ({type(err).__name__}: cut short, damaged or not PyTorch)",
            str(path),
            "use another checkpoint",
        ) from None
    made = payload.get("format") if isinstance(payload, dict) else None
    if isinstance(made, int) and made > FORMAT:
        raise TranslatorError(
            f"{NEWER} (checkpoint format {made}; this one reads 1-{FORMAT})",
            str(path),
            "upgrade translator (pip install -U, or git pull and make install) to read it",
        )
    if not isinstance(payload, dict) or made not in FORMATS or _partial(payload):
        other_models.refuse_other_payload(payload, path)
        raise TranslatorError(
            "not a translator checkpoint",
            str(path),
            "give a .pt file written by `translator train`, `import-hf` or `import-fairseq`",
        )
    return payload


def _partial(payload: dict) -> bool:
    """A dict that says format 3 without its checksums or parts was not written by `save`."""
    return payload["format"] >= 3 and not {*PARTS, "sha256"} <= payload.keys()


def load(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[Transformer, Config, Tokenizer]:
    """Rebuild the model (eval mode) with its config and tokenizer."""
    payload = read(path)
    cfg = from_dict(payload["config"], str(path))
    # the random init, which the weights replace, leaves the caller's random stream as it was
    with torch.random.fork_rng(devices=[]):
        model = Transformer(cfg.model)
    fit_weights(model, payload["model"], str(path))
    tokenizer = Tokenizer.from_proto(
        payload["tokenizer"]["proto"], payload["tokenizer"].get("target_proto")
    )
    return model.to(device).eval(), cfg, tokenizer


def fit_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: str) -> None:
    """Load `weights` into `model`; names or shapes its config does not build (a hand-edited
    config, a foreign file) are one line naming the first, not torch's list of every one."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        first = str(err).splitlines()[1:2] or ["mismatched parameters"]
        raise TranslatorError(
            f"its weights do not fit its model settings ({first[0].strip()})",
            where,
            "use a checkpoint written by `translator train` or `translator import-hf`",
        ) from None


def saved_update(path: str | Path) -> int | None:
    """The update a training checkpoint holds, read without its weights (memory-mapped,
    unverified); None for a missing or unreadable file, or one without training state."""
    try:
        return _open(path, mmap=True)["state"]["train"]["step"]
    except (TranslatorError, KeyError, TypeError):
        return None


def step_files(run_dir: str | Path) -> list[Path]:
    """A run directory's `step-N.pt` checkpoints, oldest update first (step-10 after step-9)."""
    numbered = [p for p in Path(run_dir).glob("step-*.pt") if p.stem.split("-", 1)[1].isdigit()]
    return sorted(numbered, key=lambda p: int(p.stem.split("-", 1)[1]))
