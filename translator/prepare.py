"""`translator prepare`: corpus -> cleaning -> SentencePiece -> memory-mapped id arrays in
data/<name>/.

The training split streams through in bounded memory (see data/binarize.py), so a WMT-sized corpus
fits a small machine. The directory is written under a temporary name and renamed when complete:
an interrupted or failed prepare leaves nothing that looks finished. A rerun with the same data
config (and unchanged local files) is a cache hit that touches no data.

With `train.init_from`, the checkpoint's SentencePiece model(s) encode the data instead of new ones;
so do `data.spm_model`'s (translator/vocab_source.py). The manifest records their checksum as the
setting `vocab_from`, so data prepared either way is never taken for the other.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from translator.config import Config, DataConfig, dump
from translator.data import clean, coverage
from translator.data.binarize import clean_to_scratch, encode_to_ids, sample_lines, sample_mask
from translator.data.corpus import is_hub, load_split, pair_batches, source_files
from translator.data.progress import Bars, bytes_read
from translator.data.shards import write_ids
from translator.data.tokenizer import Tokenizer, train_sentencepiece
from translator.errors import TranslatorError
from translator.files import atomic_dir, refuse_foreign_dir
from translator.prepare_record import build_manifest, summary_rows
from translator.prepared import (
    data_vocab_from,
    holds_prepared_data,
    load_manifest,
    out_of_date,
    prepared_dir,
    vocab_files,
)
from translator.prepared_files import check_checksums
from translator.vocab_source import given_vocab, vocab_record

SPLITS = ("valid", "test", "train")  # the small ones first: a missing split fails at once
SEED = 1  # SentencePiece sample and training: fixed, so that train.seed does not change the data


def run(
    cfg: Config, force: bool = False, log: Callable[[str], None] | None = None, quiet: bool = False
) -> Path:
    """Prepare the data set described by `cfg.data`; returns its directory.

    Progress bars and the summary table go to stderr; `log`, when given, gets the summary as
    plain lines instead of the table; `quiet` silences everything.
    """
    data, out = cfg.data, prepared_dir(cfg.data)
    say = (lambda line: None) if quiet else log
    vocab, given = given_vocab(cfg)
    if vocab is not None and (missing := _missing_symbols(vocab, data.user_symbols)):
        print(  # under --quiet too: the data will not read as the setting asks
            f"warning: data.user_symbols {', '.join(missing)}: not pieces of {given}'s "
            "SentencePiece model, which cuts them into pieces (a model trained here holds them: "
            f"leave {given} empty)",
            file=sys.stderr,
        )
    vocab_from = vocab.checksum() if vocab else None
    kept_vocab_from, kept_data = data_vocab_from(data, vocab_from)
    why = "" if force else out_of_date(kept_data, kept_vocab_from)
    if not force and not why:
        (say or Bars(quiet).print)(
            f"{out} is up to date (same data config); use --force to prepare again"
        )
        return out
    # replaced whole: refuse a directory that holds something else
    elsewhere = "move it away, or set another data.name or data.data_dir"
    refuse_foreign_dir(
        out, ("manifest.json",), "exists but holds no prepared data (no manifest.json)", elsewhere
    )
    if (out / "manifest.json").is_file() and not holds_prepared_data(out):
        raise TranslatorError(
            "holds a manifest.json but no prepared data (a training run directory?): "
            "prepare would replace it",
            str(out),
            elsewhere,
        )
    if why and (out / "manifest.json").is_file():  # replacing data: say why
        (say or Bars(quiet).print)(f"{out}: preparing again ({why})")
    started = time.time()
    with Bars(quiet) as bars, atomic_dir(out) as tmp:
        manifest = _prepare(data, tmp, bars, vocab, given)
        if given:
            manifest["vocab_from"] = vocab_record(cfg, vocab_from)
        manifest["seconds"] = round(time.time() - started, 1)
        manifest["step_seconds"] = bars.seconds
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (tmp / "config.yaml").write_text(dump(cfg))
    rows = summary_rows(manifest)
    if say:
        for name, value in rows:
            say(f"{name}: {value}")
    else:
        bars.summary(f"prepared {out}", rows)
    for line in coverage.warnings(manifest):  # under --quiet too, as other input warnings
        if quiet:
            print(line, file=sys.stderr)
        else:
            (say or bars.print)(line)
    return out


def _missing_symbols(vocab: Tokenizer, symbols: list[str]) -> list[str]:
    """The user symbols that a given vocabulary lacks as pieces of its own, on either side."""
    models = (vocab.sp, vocab.target_sp)
    return [s for s in symbols if any(m.piece_to_id(s) == m.unk_id() for m in models)]


def _prepare(data: DataConfig, tmp: Path, bars: Bars, vocab: Tokenizer | None, given: str) -> dict:
    """All the work, inside the temporary directory; returns the manifest. `vocab`: a tokenizer to
    encode with instead of training SentencePiece, given by the setting `given`."""
    scratch = tmp / ".scratch"
    scratch.mkdir()
    # local sources: Arrow copy, deleted at the end
    cache = None if is_hub(data.source) else scratch / "datasets"
    tables = {}
    for split in SPLITS:
        if is_hub(data.source) and bars.live:  # the hub's own download bars, then ours again
            with bars.step(f"load {split}"), bars.paused():
                tables[split] = load_split(data, split, hub_bars=True)
            continue
        files = source_files(data, split)  # local files: a bar over the bytes `datasets` has read
        size = sum(f.stat().st_size for f in files) or None
        with bars.step(f"load {split}", size, unit="B") as step, bytes_read(files, step.update):
            tables[split] = load_split(data, split, cache)
    held_out = {split: _read_pairs(tables.pop(split), data) for split in ("valid", "test")}
    cleaner = clean.Cleaner(
        data, (s for pairs in held_out.values() for side in pairs for s in side)
    )
    train = tables.pop("train")
    with bars.step("clean train", train.num_rows) as step:
        passed = clean_to_scratch(
            train, data.src_lang, data.tgt_lang, cleaner, scratch, step.advance
        )
    del train  # unmaps the Arrow file before the memory-hungry SentencePiece step
    keep = cleaner.first_occurrences(passed)
    if not keep.any():
        raise TranslatorError(
            f"no training pairs left after cleaning (dropped: {_drops(cleaner.drops)})",
            data.source,
            "check the languages, the split mapping and the cleaning rules",
        )
    if vocab:
        tokenizers = _copy_tokenizers(vocab, data, tmp)
    else:
        tokenizers = _train_tokenizers(data, scratch, keep, tmp, bars)
    with bars.step("encode train", int(keep.sum())) as step:
        counts = {
            "train": encode_to_ids(
                scratch,
                keep,
                tmp,
                tokenizers,
                data.max_tokens_per_side,
                data.max_length_ratio,
                cleaner.drops,
                step.advance,
            )
        }
    # first: an uncovered script's pairs fall to the length rules, which would be blamed
    where = f"{given}: {data.spm_model}" if given == "data.spm_model" else given or data.source
    coverage.check_unk(counts["train"]["unk"], where, given)
    _warn_of_skewed_pairs(cleaner.drops["length ratio"], int(keep.sum()), data.max_length_ratio)
    if not counts["train"]["pairs"]:
        raise TranslatorError(
            f"no training pairs left after the length rules (dropped: {_drops(cleaner.drops)})",
            data.source,
            "raise data.max_tokens_per_side or data.max_length_ratio",
        )
    for split, (src, tgt) in held_out.items():
        counts[split] = _write_eval_split(tmp, split, src, tgt, tokenizers, cleaner, data)
    shutil.rmtree(scratch)
    vocab_from = vocab.checksum() if vocab else None
    return build_manifest(data, cleaner, counts, tokenizers, tmp, vocab_from)


def _warn_of_skewed_pairs(dropped: int, pairs: int, max_ratio: float) -> None:
    """A warning when the length-ratio rule drops more than a tenth of the training pairs: a
    filter against misaligned pairs should not take that many aligned ones. A source and target
    cut into pieces of very different sizes (Chinese or Japanese beside a spaced script in one
    vocabulary, whose pieces may be whole phrases) are skewed by the vocabulary, not by
    misalignment."""
    if pairs and dropped > pairs / 10:
        print(  # under --quiet too: the data are not what the corpus holds
            f"warning: data.max_length_ratio={max_ratio:g} dropped {dropped:,} of {pairs:,} "
            f"training pairs ({100 * dropped / pairs:.0f}%), more than misaligned pairs make "
            "up: pieces of very different lengths on the two sides (Chinese or Japanese beside "
            "another script) skew the ratio; raise data.max_length_ratio, or 0 for no ratio "
            "rule",
            file=sys.stderr,
        )


def _read_pairs(table, data: DataConfig) -> tuple[list[str], list[str]]:
    """All pairs of a small split (valid/test) as two lists."""
    src, tgt = [], []
    for batch_src, batch_tgt in pair_batches(table, data.src_lang, data.tgt_lang):
        src += batch_src
        tgt += batch_tgt
    return src, tgt


def _train_tokenizers(
    data: DataConfig, scratch: Path, keep, tmp: Path, bars: Bars
) -> dict[str, Tokenizer]:
    """Side -> tokenizer: one joint SentencePiece model, or one per side."""
    files = vocab_files(data)
    if data.joint_vocab:
        joint = _train_tokenizer(files["src"], ("src", "tgt"), data, scratch, keep, tmp, bars)
        return {"src": joint, "tgt": joint}
    return {
        side: _train_tokenizer(files[side], (side,), data, scratch, keep, tmp, bars)
        for side in ("src", "tgt")
    }


def _copy_tokenizers(vocab: Tokenizer, data: DataConfig, tmp: Path) -> dict[str, Tokenizer]:
    """Side -> tokenizer from given SentencePiece model(s), put where trained ones go."""
    files = vocab_files(data)
    protos = {"src": vocab.proto(), "tgt": vocab.target_proto() or vocab.proto()}
    for side, proto in protos.items():
        (tmp / files[side]).write_bytes(proto)
    return {side: Tokenizer.from_proto(proto) for side, proto in protos.items()}


def _train_tokenizer(
    name: str, sides: tuple[str, ...], data: DataConfig, scratch: Path, keep, tmp: Path, bars: Bars
) -> Tokenizer:
    """Train `name` on the `sides` of a seeded sample of at most data.input_sentence_size kept
    sentences."""
    take = sample_mask(keep, data.input_sentence_size // len(sides), SEED)
    reading = bars.step(f"spm sample {name}", int(take.sum()) * len(sides))
    training = []

    def lines():
        yield from sample_lines(scratch, take, sides, reading.advance)
        reading.finish()  # SentencePiece has read everything; now it trains
        training.append(bars.step(f"spm train {name}"))

    def trained(done: int, total: int) -> None:  # SentencePiece's log, read on another thread
        if training:
            training[0].update(done, total)

    model = train_sentencepiece(
        lines(),
        tmp / name.removesuffix(".model"),
        vocab_size=data.vocab_size,
        model_type=data.spm_model_type,
        character_coverage=data.character_coverage,
        byte_fallback=data.byte_fallback,
        normalization=data.spm_normalization,
        user_symbols=data.user_symbols,
        input_sentence_size=0,  # 0: the sample above is the whole input
        seed=SEED,
        threads=data.spm_threads,
        progress=None if bars.quiet else trained,
        # one side's of two: a failure says which (the sides' texts differ, their settings do not)
        which="" if len(sides) == 2 else f"the {coverage.SIDES[sides[0]]} model ({name})",
    )
    for step in training:
        step.finish()
    return Tokenizer(model)


def _write_eval_split(
    tmp: Path,
    split: str,
    src: list[str],
    tgt: list[str],
    tokenizers: dict[str, Tokenizer],
    cleaner: clean.Cleaner,
    data: DataConfig,
) -> dict:
    """Ids of the normalised text, and the raw text as given (sources to decode, sacreBLEU
    references); counts, and what SentencePiece changes of the references (coverage)."""
    counts: dict = {"pairs": len(src)}
    for side, lang, texts in (("src", data.src_lang, src), ("tgt", data.tgt_lang, tgt)):
        cleaned = [cleaner.normalize(t) for t in texts]
        ids = tokenizers[side].encode(cleaned)
        if side == "tgt":
            counts["round_trip"] = coverage.round_trip(tokenizers[side], cleaned, ids)
        counts[f"{side}_tokens"] = write_ids(
            tmp / f"{split}.{side}", ids, tokenizers[side].vocab_size
        )
        # one sentence per line: a newline inside a record (JSON) would shift every later line
        (tmp / f"{split}.{lang}").write_text(
            "".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8"
        )
    return counts


def _drops(drops: Counter) -> str:
    return ", ".join(f"{rule} {n}" for rule, n in drops.items() if n) or "none"


def ensure(cfg: Config, quiet: bool = False, vocab_from: str | None = None) -> dict:
    """The manifest of `cfg.data`'s prepared directory, which is prepared first when missing
    (`train`).

    Data present is never prepared over: with other settings it is refused (load_manifest), and a
    directory without a manifest is not ours to replace. Data present is also checked against
    the sha256 prepare recorded (a second per GB, once a session, on rank 0 only: train calls
    this before the other processes start), so that damaged ids are not trained on silently.
    `vocab_from`: see load_manifest.
    """
    folder = prepared_dir(cfg.data)
    given = vocab_record(cfg, vocab_from) if vocab_from else None
    if not (folder / "manifest.json").is_file():
        run(cfg, quiet=quiet)
        return load_manifest(cfg.data, vocab_from, given)
    manifest = load_manifest(cfg.data, vocab_from, given)
    check_checksums(folder, manifest)
    return manifest
