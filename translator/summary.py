"""`translator info`: architecture and parameter count of a config or a checkpoint."""

from __future__ import annotations

import zipfile
from pathlib import Path

from translator import checkpoint, config, other_models, prepared
from translator.data.spm_files import given_tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer, count_parameters


def attention_options(m: config.ModelConfig) -> str:
    """The attention options in words: kernel, window, relative bias."""
    kinds = (
        "encoder linear (elu+1 kernel), decoder softmax" if m.attention == "linear" else "softmax"
    )
    window = f"sliding window {m.attention_window}" if m.attention_window else "no window"
    parts = [kinds, window]
    if m.positions == "relative":
        tables = "per layer" if m.relative_per_layer else "shared by each stack's layers"
        parts.append(
            f"relative bias ({m.relative_buckets} buckets to distance "
            f"{m.relative_max_distance}, {tables})"
        )
    return ", ".join(parts)


def _planned_vocab(cfg: config.Config) -> str:
    """Fill cfg.model's automatic (0) vocabulary sizes as training will: from the prepared data
    when they match cfg.data, else data.vocab_size (SentencePiece may make fewer) -> a line saying
    which."""
    data, where = cfg.data, prepared.prepared_dir(cfg.data)
    src = tgt = data.vocab_size
    said = f"data.vocab_size ({where} not prepared yet; SentencePiece may make fewer)"
    if data.spm_model:  # the given model's size, whatever the data
        try:
            given = given_tokenizer(data)
            src, tgt, said = given.vocab_size, given.target_vocab_size, "data.spm_model"
        except TranslatorError as err:
            said = f"data.vocab_size (data.spm_model is refused: {err.what})"
    elif (where / "manifest.json").is_file():
        try:
            vocab = prepared.load_manifest(data)["vocab"]
            src, tgt = vocab["src"]["size"], vocab["tgt"]["size"]
            said = f"the prepared data ({where}; data.vocab_size asks {data.vocab_size:,})"
        except TranslatorError as err:  # other settings, or damaged: training would refuse them
            said = f"data.vocab_size ({where} is refused: {err.what})"
    cfg.model.vocab_size, cfg.model.src_vocab_size = tgt, 0 if data.joint_vocab else src
    return f"  vocabulary size from {said}"


def written_by(payload: dict) -> str:
    """The checkpoint's record of the code that wrote it (checkpoint.save's made_by)."""
    made = payload.get("made_by")
    if not made:
        return "  written by a translator that did not record its version"
    commit = made.get("commit")
    at = f", commit {commit[:12]}{' with uncommitted changes' * bool(made.get('dirty'))}"
    return f"  written by translator {made['translator']}{at if commit else ''}"


def _refuse_other_models(path: Path) -> None:
    """Another toolkit's model directory, or any directory: neither a config nor a checkpoint."""
    other_models.refuse_model_directory(path)
    if path.is_dir():
        raise TranslatorError(
            "a directory, not a config or a checkpoint",
            str(path),
            "give a YAML config or a .pt file, e.g. RUN_DIR/config.yaml or RUN_DIR/best.pt",
        )


def describe(source: str, overrides: list[str]) -> str:
    """A short text: the model section, the vocabulary, the KV-cache size and the parameter
    count."""
    _refuse_other_models(Path(source))
    # torch.save writes a zip
    read_checkpoint = Path(source).suffix in (".pt", ".pth") or zipfile.is_zipfile(source)
    if read_checkpoint:
        if overrides:
            raise TranslatorError(
                "--set changes a YAML config, not a checkpoint",
                source,
                "drop --set, or give the run's config.yaml",
            )
        payload = checkpoint.read(source)
        cfg, origin = config.from_dict(payload["config"], source), [written_by(payload)]
        if cfg.train.init_from:  # a record: the checkpoint holds its own architecture
            origin.append(f"  fine-tuned from train.init_from: {cfg.train.init_from}")
    else:
        cfg, origin = config.load(source, overrides), []
    if cfg.train.init_from and not read_checkpoint:  # training would start from that
        # checkpoint: its architecture, not the config's
        where = f"train.init_from: {cfg.train.init_from}"
        try:
            _, saved = checkpoint.read_tokenizer(cfg.train.init_from)
        except TranslatorError as err:
            raise TranslatorError(err.what, f"train.init_from: {err.where}", err.fix) from None
        cfg.model = config.with_training_settings(config.from_dict(saved, where).model, cfg.model)
        origin = [f"  architecture and vocabulary from train.init_from: {cfg.train.init_from}"]
    m = cfg.model
    if m.vocab_size == 0:  # not trained yet: the vocabularies training will get
        origin.append(_planned_vocab(cfg))
    import torch

    with torch.device("meta"):  # count without allocating (big configs stay instant)
        model = Transformer(m)
    n_params = count_parameters(model)
    kv, d_head = m.n_kv_heads or m.n_heads, m.d_model // m.n_heads
    cache_per_token = 2 * m.n_decoder_layers * kv * d_head  # K and V, every decoder layer
    attention = {m.n_heads: "MHA", 1: "MQA"}.get(kv, "GQA")
    vocabulary = (
        m.vocab_size if m.src_vocab_size == 0 else f"{m.src_vocab_size} src / {m.vocab_size} tgt"
    )
    lines = [
        f"Transformer ({m.norm}-LN, {m.positions} positions, "
        f"{'tied' if m.tie_embeddings else 'untied'} embeddings)",
        f"  layers: encoder {m.n_encoder_layers}, decoder {m.n_decoder_layers}; "
        f"d_model {m.d_model}, d_ff {m.d_ff}, heads {m.n_heads} "
        f"({attention}: kv heads {kv}, d_head {d_head})",
        f"  translates {cfg.data.src_lang}->{cfg.data.tgt_lang}"
        + (f" (BLEU tokenizer {bleu})" if (bleu := cfg.train.valid_bleu_tokenize) else ""),
        f"  vocabulary {vocabulary}, max positions {m.max_positions}, dropout {m.dropout}",
        f"  self-attention: {attention_options(m)}",
        f"  decoder KV cache: {cache_per_token:,} values per target token and hypothesis"
        + (f", the last {m.attention_window} tokens only" if m.attention_window else ""),
        f"  parameters: {n_params:,} ({n_params / 1e6:.2f}M)",
        *origin,
    ]
    return "\n".join(lines)
