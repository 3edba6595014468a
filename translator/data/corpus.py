"""Parallel sentence pairs from the Hugging Face hub or local files, each as a `datasets.Dataset`.

`data.source` is one of
  hf:NAME[:CONFIG]                 a hub dataset (e.g. hf:wmt/wmt14:de-en, hf:bentrevett/multi30k)
  DIR with {split}.{lang}[.gz]     line-aligned plain text, one file per language
  DIR with {split}.tsv[.gz]        one pair per line; a header row or data.tsv_columns names
                                   the columns (a first row equal to them is a header either way)
  DIR with {split}.jsonl / .json   records `translation: {en: .., de: ..}` (the hub's WMT
                                   schema) or flat `en`, `de`; a language missing from a record
                                   is an empty side, other keys are ignored
  DIR written by save_to_disk      a DatasetDict
Each becomes an Arrow-backed, memory-mapped `datasets.Dataset`; `pair_batches` streams it in
batches. Text and TSV lines are split on "\\n" only (data/lines.py); JSON goes through `datasets`'
builder. Local directories are read in data/local_files.py (JSON in data/json_records.py); the
hub is read here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from translator.config import DataConfig
from translator.data.clean import normalize
from translator.data.json_records import is_text, lang_type, missing_language
from translator.data.local_files import load_local, split_files
from translator.errors import TranslatorError


def is_hub(source: str) -> bool:
    return source.startswith("hf:")


def warn_stderr(message: str) -> None:
    # stderr even under --quiet, as the other warnings about the input; a live progress display
    # redirects it above itself
    print(f"warning: {message}", file=sys.stderr)


def load_split(
    data: DataConfig,
    split: str,
    cache_dir: Path | None = None,
    hub_bars: bool = False,
    warn: Callable[[str], None] = warn_stderr,
):
    """Our split `split` (train/valid/test), mapped through data.splits, as a `datasets.Dataset`.

    Local sources are converted to Arrow under `cache_dir` (a scratch folder the caller deletes).
    A hub download shows the hub's and `datasets`' own progress bars when `hub_bars`. Valid/test
    pairs with an empty side are kept (so that their lines match the references they are scored
    against), with a warning through `warn` that counts them; train's are the cleaner's to drop.
    """
    name = data.splits.get(split, split)
    if is_hub(data.source):
        table = _load_hub(data.source, name, hub_bars)
    else:
        table = load_local(_datasets(), Path(data.source), name, data, cache_dir)
    check_languages(table, data.src_lang, data.tgt_lang, f"{data.source} ({name})")
    if split != "train" and (empty := count_empty_pairs(table, data)):
        warn(
            f"{data.source} ({name}): {empty:,} of {table.num_rows:,} pairs have an empty side "
            "(a blank line, or a record without the sentence): kept as they are, so that the "
            "lines match the references, and scored"
        )
    if split == "train" and data.max_train_pairs and data.max_train_pairs < table.num_rows:
        table = table.select(range(data.max_train_pairs))
    return table


def source_files(data: DataConfig, split: str) -> list[Path]:
    """The local files that `load_split` reads for our split `split`; [] for hub and save_to_disk
    sources."""
    root = Path(data.source)
    if is_hub(data.source) or not root.is_dir() or (root / "dataset_dict.json").is_file():
        return []
    return split_files(root, data.splits.get(split, split), (data.src_lang, data.tgt_lang))[1]


def languages(table) -> list[str]:
    """Language codes a table offers: fields of a `translation` struct, else its string columns."""
    import pyarrow as pa

    schema = table.data.schema
    if "translation" in schema.names:
        kind = schema.field("translation").type
        return [f.name for f in kind] if pa.types.is_struct(kind) else []
    return list(schema.names)


def check_languages(table, src_lang: str, tgt_lang: str, where: str) -> None:
    """Both languages are in the table, as text."""
    found, schema = languages(table), table.data.schema
    if "translation" in schema.names and {src_lang, tgt_lang} & set(schema.names):
        raise TranslatorError(
            "records of two shapes: some with a 'translation' field, some flat",
            where,
            "give every record one shape",
        )
    if "translation" in schema.names and not languages(table):
        raise TranslatorError(
            f"'translation' is not a record of languages (Arrow type "
            f"{schema.field('translation').type})",
            where,
            'give it as {"translation": {"en": "...", "de": "..."}}',
        )
    for lang in (src_lang, tgt_lang):
        if lang not in found:
            raise missing_language(lang, found, where)
        kind = lang_type(schema, lang)
        if not is_text(kind):
            raise TranslatorError(
                f"the {lang!r} values are not all text (Arrow type {kind})",
                where,
                "give every sentence as a string",
            )


def count_empty_pairs(table, data: DataConfig) -> int:
    """Pairs with a side that is empty once cleaned (data.drop_empty's rule for train)."""
    return sum(
        not normalize(s, False, data.normalize_spaces)
        or not normalize(t, False, data.normalize_spaces)
        for src, tgt in pair_batches(table, data.src_lang, data.tgt_lang)
        for s, t in zip(src, tgt)
    )


def pair_batches(
    table, src_lang: str, tgt_lang: str, batch_size: int = 20_000
) -> Iterator[tuple[list, list]]:
    """(sources, targets) lists of up to `batch_size` strings, streamed from the Arrow table."""
    import pyarrow.compute as pc

    nested = "translation" in table.data.schema.names
    for batch in table.with_format("arrow").iter(batch_size=batch_size):
        sides = []
        for lang in (src_lang, tgt_lang):
            column = pc.struct_field(batch["translation"], lang) if nested else batch[lang]
            # a missing sentence is an empty side
            sides.append(pc.fill_null(column, "").to_pylist())
        yield sides[0], sides[1]


def _datasets():
    """`datasets` with its own progress bars and warnings off (ours report progress)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its errors reach the user as ours
    return datasets


def _load_hub(source: str, split: str, bars: bool):
    datasets = _datasets()
    import huggingface_hub

    repo, _, subset = source[3:].partition(":")
    # Its per-retry warnings would bury the one line below when the hub cannot be reached.
    huggingface_hub.utils.logging.set_verbosity_error()
    # Downloading and converting report only through their own bars (bytes, rate, ETA).
    if bars:
        datasets.enable_progress_bars()
        huggingface_hub.utils.enable_progress_bars()
    else:
        huggingface_hub.utils.disable_progress_bars()
    try:
        return datasets.load_dataset(repo, subset or None, split=split)
    except Exception as err:  # noqa: BLE001 - any failure of a hub load gets the same advice
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if "split" in first.lower() and "unknown" in first.lower():
            raise TranslatorError(
                f"hub dataset {repo!r} has no split {split!r}: {first}",
                source,
                "map ours with --set data.splits.NAME=THEIRS",
            ) from None
        offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if env_on(v)]
        fix = "a hub source needs internet; offline, give a local path with --data PATH"
        if offline:  # the hub may well be reachable: the environment forbids asking it
            fix = f"{' and '.join(offline)} set: unset it to download, or give --data PATH"
        raise TranslatorError(f"cannot load hub dataset {repo!r}: {first}", source, fix) from None
    finally:
        datasets.disable_progress_bars()


def env_on(name: str) -> bool:
    """Whether an environment flag (HF_HUB_OFFLINE...) is set to a true value."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
