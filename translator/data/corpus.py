"""Parallel sentence pairs from the Hugging Face hub or local files, each as a `datasets.Dataset`.

`data.source` is one of
  hf:NAME[:CONFIG]                 a hub dataset (e.g. hf:wmt/wmt14:de-en, hf:bentrevett/multi30k)
  DIR with {split}.{lang}[.gz]     line-aligned plain text, one file per language
  DIR with {split}.tsv[.gz]        one pair per line; a header row or data.tsv_columns names
                                   the columns
  DIR with {split}.jsonl / .json   records `translation: {en: .., de: ..}` (the hub's WMT
                                   schema) or flat `en`, `de`
  DIR written by save_to_disk      a DatasetDict
Each becomes an Arrow-backed, memory-mapped `datasets.Dataset`; `pair_batches` streams it in
batches. Text and TSV lines are split on "\\n" only (data/lines.py); JSON goes through `datasets`'
builder.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

from translator.config import DataConfig
from translator.data.lines import line_blocks, lines_dataset, open_maybe_gz, tsv_rows, write_failure
from translator.errors import TranslatorError

EXTENSIONS = ("", ".gz")


def is_hub(source: str) -> bool:
    return source.startswith("hf:")


def load_split(data: DataConfig, split: str, cache_dir: Path | None = None, hub_bars: bool = False):
    """Our split `split` (train/valid/test), mapped through data.splits, as a `datasets.Dataset`.

    Local sources are converted to Arrow under `cache_dir` (a scratch folder the caller deletes).
    A hub download shows the hub's and `datasets`' own progress bars when `hub_bars`.
    """
    name = data.splits.get(split, split)
    if is_hub(data.source):
        table = _load_hub(data.source, name, hub_bars)
    else:
        table = _load_local(Path(data.source), name, data, cache_dir)
    check_languages(table, data.src_lang, data.tgt_lang, f"{data.source} ({name})")
    if split == "train" and data.max_train_pairs and data.max_train_pairs < table.num_rows:
        table = table.select(range(data.max_train_pairs))
    return table


def source_files(data: DataConfig, split: str) -> list[Path]:
    """The local files that `load_split` reads for our split `split`; [] for hub and save_to_disk
    sources."""
    root = Path(data.source)
    if is_hub(data.source) or not root.is_dir() or (root / "dataset_dict.json").is_file():
        return []
    return _split_files(root, data.splits.get(split, split), (data.src_lang, data.tgt_lang))[1]


def _split_files(root: Path, split: str, langs: tuple[str, str]) -> tuple[str | None, list[Path]]:
    """Which local format holds `split` (their name) and its files: text pair, TSV or JSON lines;
    (None, []) if none."""
    texts = [_find(root, f"{split}.{lang}") for lang in langs]
    if all(texts):
        return "text", texts
    if tsv := _find(root, f"{split}.tsv"):
        return "tsv", [tsv]
    if jsonl := _find(root, f"{split}.jsonl") or _find(root, f"{split}.json"):
        return "json", [jsonl]
    return None, []


def languages(table) -> list[str]:
    """Language codes a table offers: fields of a `translation` struct, else its string columns."""
    schema = table.data.schema
    if "translation" in schema.names:
        return [f.name for f in schema.field("translation").type]
    return list(schema.names)


def check_languages(table, src_lang: str, tgt_lang: str, where: str) -> None:
    """Both languages are in the table, as text."""
    import pyarrow as pa

    found, schema = languages(table), table.data.schema
    if "translation" in schema.names and {src_lang, tgt_lang} & set(schema.names):
        raise TranslatorError(
            "records of two shapes: some with a 'translation' field, some flat",
            where,
            "give every record one shape",
        )
    for lang in (src_lang, tgt_lang):
        if lang not in found:
            raise TranslatorError(
                f"language {lang!r} not in the data (found: {', '.join(found) or 'none'})",
                where,
                "set data.src_lang / data.tgt_lang to codes the data has",
            )
        kind = (
            schema.field("translation").type.field(lang)
            if "translation" in schema.names
            else schema.field(lang)
        ).type
        if not (
            pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)
        ):
            raise TranslatorError(
                f"the {lang!r} values are not all text (Arrow type {kind})",
                where,
                "give every sentence as a string",
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
        offline = [v for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if _env_on(v)]
        fix = "a hub source needs internet; offline, give a local path with --data PATH"
        if offline:  # the hub may well be reachable: the environment forbids asking it
            fix = f"{' and '.join(offline)} set: unset it to download, or give --data PATH"
        raise TranslatorError(f"cannot load hub dataset {repo!r}: {first}", source, fix) from None
    finally:
        datasets.disable_progress_bars()


def _env_on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _load_local(root: Path, split: str, data: DataConfig, cache_dir: Path | None):
    os.environ["HF_DATASETS_OFFLINE"] = "1"  # a local source must never wait on the network
    os.environ["HF_HUB_OFFLINE"] = "1"
    datasets = _datasets()
    if not root.is_dir():
        raise TranslatorError(
            "no such directory"
            if not root.exists()
            else "data source is neither hf:NAME nor a directory",
            str(root),
            "give a directory of {split}.{lang} / .tsv / .jsonl files or hf:NAME[:CONFIG]",
        )
    if (root / "dataset_dict.json").is_file():
        saved = datasets.load_from_disk(str(root))
        if split not in saved:
            raise TranslatorError(
                f"no split {split!r} (splits: {', '.join(saved)})",
                str(root),
                "map ours with --set data.splits.NAME=THEIRS",
            )
        return saved[split]
    if (root / "state.json").is_file():
        raise TranslatorError(
            "a dataset saved without splits",
            str(root),
            "save a DatasetDict({'train': ..., 'valid': ..., 'test': ...}) with save_to_disk",
        )
    langs = (data.src_lang, data.tgt_lang)
    kind, files = _split_files(root, split, langs)
    if kind == "text":
        return _load_text_pair(datasets, files, langs, cache_dir)
    if kind == "tsv":
        return _load_tsv(datasets, files[0], data, cache_dir)
    if kind == "json":
        return _builder(datasets, "json", files[0], cache_dir)
    texts = [_find(root, f"{split}.{lang}") for lang in langs]
    if any(texts):
        missing = langs[texts.index(None)]
        raise TranslatorError(
            f"missing file {split}.{missing}",
            str(root),
            f"languages found for {split}: {', '.join(_langs_of(root, split)) or 'none'}",
        )
    raise TranslatorError(
        f"no files for split {split!r} ({split}.{{lang}}, {split}.tsv or {split}.jsonl)",
        str(root),
        f"splits found: {', '.join(_splits_of(root)) or 'none'}; map ours with "
        "--set data.splits.NAME=FOUND",
    )


def _load_text_pair(datasets, paths: list[Path], langs: tuple[str, str], cache_dir: Path | None):
    for path in paths:
        _check_not_empty(path)
    sides = [
        lines_dataset(
            datasets, path, ({lang: lines} for lines in line_blocks(path)), [lang], cache_dir
        )
        for path, lang in zip(paths, langs)
    ]
    if sides[0].num_rows != sides[1].num_rows:
        raise TranslatorError(
            f"line counts differ: {paths[0]} has {sides[0].num_rows} lines, {paths[1]} has "
            f"{sides[1].num_rows}",
            str(paths[0].parent),
            "the files of a pair must be line-aligned",
        )
    # side by side: one Arrow table with a column per language, no copy of the text
    return datasets.concatenate_datasets(sides, axis=1)


def _load_tsv(datasets, path: Path, data: DataConfig, cache_dir: Path | None):
    _check_not_empty(path)
    names = [c.strip() for c in data.tsv_columns.split(",") if c.strip()]
    header = _lines(path, 1)[0].split("\t")
    if not names and not {data.src_lang, data.tgt_lang} <= set(header):
        raise TranslatorError(
            f"the first row does not name the columns {data.src_lang} and {data.tgt_lang}",
            f"{path}:1",
            "add a header row, or set data.tsv_columns (e.g. en,de) for headerless files",
        )
    columns = names or header
    table = lines_dataset(
        datasets, path, tsv_rows(path, columns, skip=0 if names else 1), columns, cache_dir
    )
    if not table.num_rows:
        raise TranslatorError("no data rows", str(path), "give at least one sentence pair")
    return table


def _builder(datasets, kind: str, path: Path, cache_dir: Path | None, **options):
    """One file through a `datasets` packaged builder (json), with errors that name the file."""
    _check_not_empty(path)
    try:
        table = datasets.load_dataset(
            kind,
            data_files=str(path),
            split="train",
            cache_dir=str(cache_dir) if cache_dir else None,
            **options,
        )
        if kind == "json":  # Arrow's JSON reader takes bytes as they are: check the UTF-8 here
            table.data.table.validate(full=True)
        return table
    except Exception as err:  # noqa: BLE001 - builders wrap the cause; we name the file and line
        if _caused_by(err, UnicodeDecodeError) or "utf" in _messages(err).lower():
            line = first_invalid_utf8_line(path)
            if line:
                raise TranslatorError(
                    "invalid UTF-8", f"{path}:{line}", "re-encode the file as UTF-8"
                ) from None
        full = write_failure(err)
        if full is not None:  # the builder's cache ran out of room: not the input's fault
            raise TranslatorError(
                f"cannot write the datasets cache: {full.strerror}",
                str(cache_dir or "~/.cache"),
                "free some space (or point HF_DATASETS_CACHE elsewhere)",
            ) from None
        if kind == "json" and (line := first_invalid_json_line(path)):
            raise TranslatorError(
                "not a JSON object", f"{path}:{line}", "write one JSON object per line"
            ) from None
        cause = err.__cause__ or err.__context__ or err
        message = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise TranslatorError(
            f"cannot read {kind} file: {message}", str(path), "check its format"
        ) from None


def _messages(err: BaseException | None) -> str:
    """The messages of an exception and of everything it wraps."""
    found = []
    while err is not None:
        found.append(str(err))
        err = err.__cause__ or err.__context__
    return " ".join(found)


def _caused_by(err: BaseException | None, kind: type) -> bool:
    while err is not None:
        if isinstance(err, kind):
            return True
        err = err.__cause__ or err.__context__
    return False


def first_invalid_utf8_line(path: Path) -> int:
    """1-based number of the first line that is not valid UTF-8 (0 if none)."""
    with open_maybe_gz(path) as handle:
        for number, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


def first_invalid_json_line(path: Path) -> int:
    """1-based number of the first non-blank line that is not a JSON object (0 if none, or if the
    file is one JSON array); Arrow's reader counts its rows from 0 and skips blank lines."""
    with open_maybe_gz(path) as handle:
        for number, raw in enumerate(handle, 1):
            if raw.lstrip().startswith(b"["):
                return 0
            if raw.strip():
                try:
                    if not isinstance(json.loads(raw), dict):
                        return number
                except ValueError:
                    return number
    return 0


def _check_not_empty(path: Path) -> None:
    """An empty file is named as such (the builders' own messages for it say nothing useful)."""
    if not _lines(path, 1):
        raise TranslatorError("the file is empty", str(path), "give at least one line")


def _lines(path: Path, count: int) -> list[str]:
    """The first `count` lines of a (possibly gzipped) file, fewer if it is shorter; without a
    byte-order mark."""
    try:
        with open_maybe_gz(path) as handle:
            raw = [handle.readline() for _ in range(count)]
    except gzip.BadGzipFile:
        raise TranslatorError(
            "not a gzip file", str(path), "gzip it, or name it without .gz"
        ) from None
    except (OSError, EOFError) as err:
        raise TranslatorError(
            f"cannot read file: {getattr(err, 'strerror', None) or str(err) or 'it ends early'}",
            str(path),
            "check the file",
        ) from None
    text = [line.decode("utf-8", errors="replace").rstrip("\r\n") for line in raw if line]
    return [text[0].removeprefix("\ufeff"), *text[1:]] if text else []


def _find(root: Path, name: str) -> Path | None:
    """root/name or root/name.gz; both there is refused (which one is current?), as is a
    directory of that name."""
    found = [root / f"{name}{ext}" for ext in EXTENSIONS if (root / f"{name}{ext}").exists()]
    if len(found) > 1:
        raise TranslatorError(
            f"both {name} and {name}.gz are there",
            str(root),
            "remove (or move away) the one that is not current",
        )
    if found and not found[0].is_file():
        raise TranslatorError("a directory, not a file", str(found[0]), "check the path")
    return found[0] if found else None


def _visible_files(root: Path) -> list[str]:
    return sorted(
        p.name.removesuffix(".gz")
        for p in root.iterdir()
        if p.is_file() and not p.name.startswith(".")
    )


def _splits_of(root: Path) -> list[str]:
    return sorted({name.rsplit(".", 1)[0] for name in _visible_files(root) if "." in name})


def _langs_of(root: Path, split: str) -> list[str]:
    return [name[len(split) + 1 :] for name in _visible_files(root) if name.startswith(f"{split}.")]
