"""A local directory of sentence pairs: {split}.{lang} text pairs, TSV or JSON lines (plain or
.gz; JSON in data/json_records.py), or a `save_to_disk` dataset, each read into a
`datasets.Dataset`.

Every refusal names the file (and line) at fault: a missing language, line counts that differ,
an empty file, UTF-16/32 text, bytes that are not UTF-8, a broken JSON line, a file both plain
and gzipped.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from translator.config import DataConfig
from translator.data.json_records import load_json
from translator.data.lines import line_blocks, lines_dataset, open_maybe_gz, tsv_rows
from translator.errors import TranslatorError
from translator.input_lines import refuse_wide, wide_encoding

EXTENSIONS = ("", ".gz")


def split_files(root: Path, split: str, langs: tuple[str, str]) -> tuple[str | None, list[Path]]:
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


def load_local(datasets, root: Path, split: str, data: DataConfig, cache_dir: Path | None):
    """Their split `split` of the directory `root` (see data/corpus.py for the formats)."""
    if not root.is_dir():
        raise TranslatorError(
            "no such directory"
            if not root.exists()
            else "data source is neither hf:NAME nor a directory",
            str(root),
            "give a directory of {split}.{lang} / .tsv / .jsonl files or hf:NAME[:CONFIG]",
        )
    if (root / "dataset_dict.json").is_file():
        try:
            saved = datasets.load_from_disk(str(root))
        except (ValueError, KeyError, TypeError) as err:  # its JSON metadata, damaged
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise TranslatorError(
                f"a saved dataset whose metadata cannot be read ({type(err).__name__}: {first})",
                str(root),
                "save it again with save_to_disk",
            ) from None
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
    kind, files = split_files(root, split, langs)
    if kind == "text":
        return _load_text_pair(datasets, files, langs, cache_dir)
    if kind == "tsv":
        return _load_tsv(datasets, files[0], data, cache_dir)
    if kind == "json":
        _check_start(files[0])
        return load_json(datasets, files[0], langs, cache_dir)
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
        _check_start(path)
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
    """One pair per row. Without data.tsv_columns a header row must name the columns; with it, a
    first row that is the column names as given (a header kept in the file) is skipped too, so it
    does not become a pair. A first row naming them in another order is refused: which is right?"""
    _check_start(path)
    names = [c.strip() for c in data.tsv_columns.split(",") if c.strip()]
    named = [field.strip() for field in _lines(path, 1)[0].split("\t")]  # the header, if any
    if not names and not {data.src_lang, data.tgt_lang} <= set(named):
        raise TranslatorError(
            f"the first row does not name the columns {data.src_lang} and {data.tgt_lang}",
            f"{path}:1",
            "add a header row, or set data.tsv_columns (e.g. en,de) for headerless files",
        )
    twice = sorted({name for name in names or named if (names or named).count(name) > 1})
    if twice:  # a table's column names are unique: which one holds the text?
        raise TranslatorError(
            f"column {twice[0]!r} is named twice",
            "data.tsv_columns" if names else f"{path}:1",
            "give each column its own name",
        )
    if names and named != names and sorted(named) == sorted(names):
        raise TranslatorError(
            f"the header row names the columns in another order ({', '.join(named)}) than "
            f"data.tsv_columns ({', '.join(names)})",
            f"{path}:1",
            "give data.tsv_columns in file order, or leave it empty to follow the header",
        )
    columns = names or named
    skip = 0 if names and named != names else 1
    table = lines_dataset(datasets, path, tsv_rows(path, columns, skip=skip), columns, cache_dir)
    if not table.num_rows:
        raise TranslatorError("no data rows", str(path), "give at least one sentence pair")
    return table


def _check_start(path: Path) -> None:
    """An empty file, or one in UTF-16 or UTF-32, is named as such: the builders say nothing
    useful about the one, and the other reaches the user as line counts that differ."""
    head = _read(path, lambda handle: handle.read(4096))
    if not head:
        raise TranslatorError("the file is empty", str(path), "give at least one line")
    if encoding := wide_encoding(head):
        refuse_wide(encoding, str(path))


def _lines(path: Path, count: int) -> list[str]:
    """The first `count` lines of a (possibly gzipped) file, fewer if it is shorter; without a
    byte-order mark."""
    raw = _read(path, lambda handle: [handle.readline() for _ in range(count)])
    text = [line.decode("utf-8", errors="replace").rstrip("\r\n") for line in raw if line]
    return [text[0].removeprefix("\ufeff"), *text[1:]] if text else []


def _read(path: Path, read):
    """`read(handle)` on the (possibly gzipped) file, with one-line errors for what stops it."""
    try:
        with open_maybe_gz(path) as handle:
            return read(handle)
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
