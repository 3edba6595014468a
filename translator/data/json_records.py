"""JSON-lines (or one JSON array) records of sentence pairs read by `datasets`' json builder:
WMT-style `translation` records or flat ones, with errors that name the file and line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from translator.data.lines import open_maybe_gz, write_failure
from translator.errors import TranslatorError


def load_json(datasets, path: Path, langs: tuple[str, str], cache_dir: Path | None):
    """The records of `path` as a `datasets.Dataset`, our languages' values all text."""
    table = _translation_as_struct(
        datasets, _read_records(datasets, path, cache_dir, langs), path, langs
    )
    _check_text(table, path, langs)
    return table


def _read_records(datasets, path: Path, cache_dir: Path | None, langs: tuple[str, str]):
    """The file through `datasets`' json builder, with errors that name the file (and the line,
    for a value of one of `langs` that is not text)."""
    try:
        table = datasets.load_dataset(
            "json",
            data_files=str(path),
            split="train",
            cache_dir=str(cache_dir) if cache_dir else None,
        )
        # Arrow's JSON reader takes bytes as they are: check the UTF-8 here
        table.data.table.validate(full=True)
        return table
    except Exception as err:  # noqa: BLE001 - the builder wraps the cause; we name file and line
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
        if line := first_invalid_json_line(path):
            raise TranslatorError(
                "not a JSON object", f"{path}:{line}", "write one JSON object per line"
            ) from None
        with open_maybe_gz(path) as handle:
            if not any(raw.strip() for raw in handle):
                raise TranslatorError(
                    "no records (empty, or blank lines only)",
                    str(path),
                    "write one JSON object per line",
                ) from None
        # Arrow's reader: "Column(/translation/de) changed from string to number in row N"
        changed = re.search(r"Column\(/(?:translation/)?([^/)]+)\) changed from", _messages(err))
        if changed and changed[1] in langs:
            raise not_text(changed[1], path) from None
        cause = err.__cause__ or err.__context__ or err
        message = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise TranslatorError(
            f"cannot read json file: {message}", str(path), "check its format"
        ) from None


def _translation_as_struct(datasets, table, path: Path, langs: tuple[str, str]):
    """A `translation` column that `datasets` read as JSON text (its records do not all have the
    same keys) as a struct of our two languages, as it reads records that do: a missing language
    is None (an empty side, dropped and counted in train) and any other key is ignored."""
    if "translation" not in table.column_names or not isinstance(
        table.features["translation"], datasets.Json
    ):
        return table
    found = {}  # every key of every record, in order: what the data offers when a language is not

    def pick(records: list) -> dict[str, list]:
        for record in records:
            if not isinstance(record, dict | None):
                raise _not_a_record(path)
            found.update(dict.fromkeys(record or {}))
        sides = {lang: [(record or {}).get(lang) for record in records] for lang in langs}
        for lang, values in sides.items():
            if not all(isinstance(value, str | None) for value in values):
                raise not_text(lang, path)
        return {"translation": [dict(zip(langs, pair)) for pair in zip(*sides.values())]}

    features = table.features.copy()
    features["translation"] = {lang: datasets.Value("string") for lang in langs}
    # not from a cache: `pick` must see every record to collect `found`
    table = table.map(
        pick,
        batched=True,
        input_columns=["translation"],
        features=features,
        load_from_cache_file=False,
    )
    for lang in langs:
        if lang not in found:
            raise missing_language(lang, list(found), str(path))
    return table


def _check_text(table, path: Path, langs: tuple[str, str]) -> None:
    """Every value of our languages is a string (or missing); else the first line that is not is
    named. The Arrow type tells whether to look: the file is read again only then."""
    for lang in langs:
        kind = lang_type(table.data.schema, lang)
        if kind is not None and not is_text(kind):
            raise not_text(lang, path)


def lang_type(schema, lang: str):
    """The Arrow type of `lang`'s values, in a `translation` struct or a column; None if absent."""
    import pyarrow as pa

    if "translation" in schema.names:
        nested = schema.field("translation").type
        if pa.types.is_struct(nested) and nested.get_field_index(lang) >= 0:
            return nested.field(lang).type
    return schema.field(lang).type if lang in schema.names else None


def is_text(kind) -> bool:
    """An Arrow type of sentences: strings, or no value at all."""
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)


def _not_a_record(path: Path) -> TranslatorError:
    line = _first_line(path, lambda r: not isinstance(r.get("translation"), dict | None))
    return TranslatorError(
        "'translation' is not a record of languages",
        f"{path}:{line}" if line else str(path),
        'give it as {"translation": {"en": "...", "de": "..."}}',
    )


def missing_language(lang: str, found: list[str], where: str) -> TranslatorError:
    return TranslatorError(
        f"language {lang!r} not in the data (found: {', '.join(found) or 'none'})",
        where,
        "set data.src_lang / data.tgt_lang to codes the data has",
    )


def not_text(lang: str, path: Path) -> TranslatorError:
    """The error for a value of `lang` that is not a string, naming the first such line."""

    def bad(record: dict) -> bool:
        pairs = record.get("translation")
        value = (pairs if isinstance(pairs, dict) else record).get(lang)
        return not isinstance(value, str | None)

    line = _first_line(path, bad)
    return TranslatorError(
        f"the {lang!r} value is not text",
        f"{path}:{line}" if line else str(path),
        "give every sentence as a string",
    )


def _first_line(path: Path, bad) -> int:
    """1-based number of the first line of a JSON-lines file that holds an object for which
    `bad(object)` is true; 0 if none, or if the file is one JSON array. Reads the whole file: only
    for naming the line of an error."""
    with open_maybe_gz(path) as handle:
        for number, raw in enumerate(handle, 1):
            if raw.lstrip().startswith(b"["):
                return 0
            try:
                record = json.loads(raw) if raw.strip() else None
            except ValueError:
                continue
            if isinstance(record, dict) and bad(record):
                return number
    return 0


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
    first = True
    with open_maybe_gz(path) as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            if first and raw.lstrip().startswith(b"["):  # a file that is one JSON array
                try:
                    records = json.loads(raw)
                except ValueError:  # over several lines
                    return 0
                return 0 if all(isinstance(r, dict) for r in records) else number
            first = False
            try:
                if not isinstance(json.loads(raw), dict):
                    return number
            except ValueError:
                return number
    return 0
