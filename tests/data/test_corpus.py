"""Every source format reaches the same pairs through `datasets`; bad input gives one clear
error."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

import datasets
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.data.conftest import REPO, tiny_config, write_text_corpus
from translator.data.corpus import load_split, pair_batches
from translator.errors import TranslatorError

EN = ['A man says "hi".', "NA", "null", "Two dogs # run.", "", "Ein Satz?"]
DE = ['Ein Mann sagt "hallo".', "NA", "nichts", "Zwei Hunde # rennen.", "leer", "A sentence?"]


def pairs(data, split="train", cache=None):
    table = load_split(data.data, split, cache)
    out_src, out_tgt = [], []
    for src, tgt in pair_batches(table, data.data.src_lang, data.data.tgt_lang, batch_size=4):
        out_src += src
        out_tgt += tgt
    return out_src, out_tgt


def write_all_formats(root):
    """The same pairs in every local format the loader accepts; returns {format: (directory,
    overrides)}."""
    write_text_corpus(root / "text", {"train": (EN, DE)})
    (root / "gz").mkdir()
    for lang, lines in (("en", EN), ("de", DE)):
        (root / "gz" / f"train.{lang}.gz").write_bytes(
            gzip.compress("".join(s + "\n" for s in lines).encode())
        )
    (root / "tsv").mkdir()  # header row, columns in the other order
    (root / "tsv" / "train.tsv").write_text(
        "de\ten\n" + "".join(f"{d}\t{e}\n" for e, d in zip(EN, DE))
    )
    (root / "tsv_bare").mkdir()
    (root / "tsv_bare" / "train.tsv").write_text("".join(f"{e}\t{d}\n" for e, d in zip(EN, DE)))
    (root / "wmt").mkdir()
    (root / "wmt" / "train.jsonl").write_text(
        "".join(json.dumps({"translation": {"de": d, "en": e}}) + "\n" for e, d in zip(EN, DE))
    )
    (root / "flat").mkdir()
    (root / "flat" / "train.jsonl").write_text(
        "".join(json.dumps({"en": e, "de": d}) + "\n" for e, d in zip(EN, DE))
    )
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"en": EN, "de": DE})}).save_to_disk(
        str(root / "saved")
    )
    return {
        "text": [],
        "gz": [],
        "tsv": [],
        "tsv_bare": ["data.tsv_columns=en,de"],
        "wmt": [],
        "flat": [],
        "saved": [],
    }


def test_every_local_format_gives_the_same_pairs(tmp_path):
    formats = write_all_formats(tmp_path / "src")
    for name, overrides in formats.items():
        cfg = tiny_config(tmp_path / "src" / name, tmp_path / "data", *overrides)
        assert pairs(cfg, cache=tmp_path / "cache") == (EN, DE), name


def test_direction_is_a_config_field(tmp_path):
    write_all_formats(tmp_path / "src")
    cfg = tiny_config(
        tmp_path / "src" / "wmt", tmp_path / "data", "data.src_lang=de", "data.tgt_lang=en"
    )
    assert pairs(cfg, cache=tmp_path / "cache") == (DE, EN)


def test_hub_records_and_split_mapping(tmp_path, monkeypatch):
    calls = []

    def fake_load_dataset(repo, subset=None, split=None, **kwargs):
        calls.append((repo, subset, split))
        return datasets.Dataset.from_dict(
            {"translation": [{"de": d, "en": e} for e, d in zip(EN, DE)]}
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    cfg = tiny_config("hf:wmt/wmt14:de-en", tmp_path / "data", "data.splits.valid=validation")
    assert pairs(cfg, "valid") == (EN, DE)
    assert calls == [("wmt/wmt14", "de-en", "validation")]


def test_unknown_hub_name_says_it_needs_internet(tmp_path, monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError(
            "Couldn't reach 'nobody/nothing' on the Hub (LocalEntryNotFoundError)"
        )

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    started = time.time()
    with pytest.raises(TranslatorError, match="needs internet.*local path"):
        load_split(tiny_config("hf:nobody/nothing", tmp_path / "data").data, "train")
    assert time.time() - started < 2
    # offline by the environment's choice: the line says which variable, not "no internet"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TranslatorError, match="HF_HUB_OFFLINE set: unset it to download"):
        load_split(tiny_config("hf:nobody/nothing", tmp_path / "data").data, "train")


def test_mismatched_line_counts_name_both_files(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE[:-1])})
    with pytest.raises(TranslatorError) as err:
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")
    message = str(err.value)
    assert (
        f"{root / 'train.en'} has {len(EN)} lines" in message
        and f"{root / 'train.de'} has {len(DE) - 1}" in message
    )


def test_missing_split_lists_the_splits_found(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE), "dev": (EN, DE)})
    with pytest.raises(
        TranslatorError, match=r"split 'valid'.*splits found: dev, train.*data.splits"
    ):
        pairs(tiny_config(root, tmp_path / "data"), "valid", cache=tmp_path / "cache")


@pytest.mark.parametrize("name", ["text", "wmt", "flat", "saved"])
def test_missing_language_is_named(tmp_path, name):
    write_all_formats(tmp_path / "src")
    cfg = tiny_config(tmp_path / "src" / name, tmp_path / "data", "data.tgt_lang=fr")
    with pytest.raises(TranslatorError, match=r"\bfr\b"):
        pairs(cfg, cache=tmp_path / "cache")


def test_tsv_without_header_needs_column_names(tmp_path):
    write_all_formats(tmp_path / "src")
    with pytest.raises(TranslatorError, match="train.tsv:1.*data.tsv_columns"):
        pairs(
            tiny_config(tmp_path / "src" / "tsv_bare", tmp_path / "data"), cache=tmp_path / "cache"
        )


@pytest.mark.parametrize(
    "records",
    [
        [{"en": "a", "de": 1}],
        [{"en": "a", "de": "eins"}, {"en": "b", "de": 2}],
        [{"translation": {"en": "a", "de": 1.5}}],
        [{"translation": {"en": "a", "de": "eins"}}, {"en": "b", "de": "zwei"}],
    ],
)
def test_records_that_are_not_text_or_of_mixed_shape_are_refused(tmp_path, records):
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(
        TranslatorError, match=r"jsonl:\d+: the 'de' value is not text|records of two shapes"
    ):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


@pytest.mark.parametrize("name", ["text", "wmt"])
def test_a_full_cache_disk_is_not_blamed_on_the_input(tmp_path, monkeypatch, name):
    """Text lines are written to the Arrow cache by us, JSON records by `datasets`' builder: both
    say so."""
    import errno
    import tempfile

    write_all_formats(tmp_path / "src")

    def full(*args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as err:
            raise RuntimeError("An error occurred while generating the dataset") from err

    monkeypatch.setattr(datasets, "load_dataset", full)
    monkeypatch.setattr(tempfile, "mkstemp", lambda *args, **kwargs: _enospc())
    with pytest.raises(
        TranslatorError, match="cannot write the datasets cache: No space left on device"
    ):
        pairs(tiny_config(tmp_path / "src" / name, tmp_path / "data"), cache=tmp_path / "cache")


def _enospc():
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("bare", [False, True])
def test_tsv_rows_with_more_fields_than_columns_are_refused(tmp_path, bare):
    """pandas would read the extra leading field as an index and shift the columns, silently."""
    root = tmp_path / "src"
    root.mkdir()
    rows = "".join(f"{e}\t{d}\t{d}\n" for e, d in zip(EN, DE))
    (root / "train.tsv").write_text(rows if bare else "en\tde\n" + rows)
    cfg = tiny_config(root, tmp_path / "data", *(["data.tsv_columns=en,de"] if bare else []))
    with pytest.raises(
        TranslatorError,
        match=f"train.tsv:{1 if bare else 2}: 3 tab-separated fields, but 2 columns",
    ):
        pairs(cfg, cache=tmp_path / "cache")


@pytest.mark.parametrize(
    "name, text, error",
    [
        ("train.en", "", "train.en: the file is empty"),
        ("train.tsv", "", "train.tsv: the file is empty"),
        ("train.tsv", "en\tde\n", "train.tsv: no data rows"),
        ("train.jsonl", "", "train.jsonl: the file is empty"),
    ],
)
def test_empty_files_are_named(tmp_path, name, text, error):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE)})
    if name != "train.en":
        (root / "train.en").unlink(), (root / "train.de").unlink()
    (root / name).write_text(text)
    with pytest.raises(TranslatorError, match=error):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


@pytest.mark.parametrize("name", ["train.de", "train.de.gz", "train.tsv", "train.jsonl"])
def test_invalid_utf8_names_file_and_line(tmp_path, name):
    lines = {
        "train.de": b"eins\nzwei\ndrei \xff kaputt\nvier\n",
        "train.tsv": b"en\tde\na\teins\nb\tzwei \xff\nc\tdrei\n",
        "train.jsonl": b'{"en": "a", "de": "eins"}\n{"en": "b", "de": "zwei"}\n'
        b'{"en": "c", "de": "\xff"}\n',
    }
    root = write_text_corpus(
        tmp_path / "src", {"train": (["a", "b", "c", "d"], ["1", "2", "3", "4"])}
    )
    if name != "train.de.gz":
        (root / "train.de").unlink()
        if name != "train.de":
            (root / "train.en").unlink()
        (root / name).write_bytes(lines[name])
    else:
        (root / "train.de").rename(root / "other")
        (root / name).write_bytes(gzip.compress(lines["train.de"]))
    with pytest.raises(TranslatorError, match=rf"{name}:3: invalid UTF-8"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


def test_max_train_pairs_takes_the_first_ones(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE)})
    assert pairs(
        tiny_config(root, tmp_path / "data", "data.max_train_pairs=2"), cache=tmp_path / "c"
    ) == (EN[:2], DE[:2])


def test_saved_dataset_without_splits_is_refused(tmp_path):
    datasets.Dataset.from_dict({"en": EN, "de": DE}).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(TranslatorError, match="without splits.*DatasetDict"):
        pairs(tiny_config(tmp_path / "saved", tmp_path / "data"))


def test_hub_split_that_does_not_exist_is_named(tmp_path, monkeypatch):
    def no_such_split(repo, subset=None, split=None, **kwargs):
        raise ValueError(
            f"Unknown split \"{split}\". Should be one of ['train', 'validation', 'test']."
        )

    monkeypatch.setattr(datasets, "load_dataset", no_such_split)
    with pytest.raises(TranslatorError, match="has no split 'valid'.*data.splits"):
        load_split(tiny_config("hf:bentrevett/multi30k", tmp_path / "data").data, "valid")


def test_a_lone_cr_inside_a_line_does_not_shift_the_pairs(tmp_path):
    """Issue 16's example: universal newlines made 4 lines of each file and paired (two, B one), (b,
    two)..."""
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.en").write_bytes(b"a one\rtwo\nb\nc\n")
    (root / "train.de").write_bytes(b"A\nB one\rtwo\nC\n")
    assert pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache") == (
        ["a one\rtwo", "b", "c"],
        ["A", "B one\rtwo", "C"],
    )


@pytest.mark.parametrize("name", ["text", "gz", "tsv"])
def test_only_newline_ends_a_line_in_every_line_format(tmp_path, name):
    separators = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
    en = [f"en{i}{sep}more" for i, sep in enumerate(separators)] + ["crlf"]
    de = [f"de{i}{sep}mehr" for i, sep in enumerate(separators)] + ["crlf"]
    root = tmp_path / "src"
    root.mkdir()
    if name == "tsv":
        (root / "train.tsv").write_bytes(
            b"en\tde\r\n" + "".join(f"{e}\t{d}\r\n" for e, d in zip(en, de)).encode()
        )
    else:
        for lang, lines in (("en", en), ("de", de)):
            raw = "".join(line + "\n" for line in lines[:-1]).encode() + b"crlf\r\n"
            (root / f"train.{lang}{'.gz' if name == 'gz' else ''}").write_bytes(
                gzip.compress(raw) if name == "gz" else raw
            )
    assert pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache") == (en, de)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        # no NUL: NULs beside most newlines are how a UTF-16 file is told (local_files.py), and
        # such text is refused on purpose (tests/data/test_local_edge_cases.py)
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
        ),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
)
@example(lines=["\r"], trailing_newline=False)  # a CR ending the file is a line ending too
def test_text_lines_are_what_splitting_the_bytes_on_newline_gives(
    tmp_path_factory, lines, trailing_newline
):
    """The reference: bytes split on b"\\n" (one CR before it dropped, as CRLF), nothing else;
    but a byte-order mark opening the file goes, and a file whose only line breaks are CRs is
    refused."""
    root = tmp_path_factory.mktemp("src")
    raw = "\n".join(lines).encode() + b"\n" * trailing_newline
    if not raw.strip(b"\n"):
        return  # an empty file is refused by name (tested above)
    for lang in ("en", "de"):
        (root / f"train.{lang}").write_bytes(raw)
    if b"\n" not in raw and b"\r" in raw.removesuffix(b"\r"):
        with pytest.raises(TranslatorError, match="CR alone"):
            pairs(tiny_config(root, root / "data"), cache=root / "cache")
        return
    expected = raw.split(b"\n")
    if raw.endswith(b"\n"):
        expected.pop()
    expected = [line.removesuffix(b"\r").decode() for line in expected]
    expected[0] = expected[0].removeprefix("\ufeff")
    got, _ = pairs(tiny_config(root, root / "data"), cache=root / "cache")
    assert got == expected


def test_a_tsv_row_with_a_missing_field_is_named(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.tsv").write_text("en\tde\na\teins\n\nb\n")
    with pytest.raises(TranslatorError, match=r"train.tsv:4: 1 tab-separated field, but 2 columns"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")
    # a blank line is an empty pair, as in text files
    (root / "train.tsv").write_text("en\tde\na\teins\n\n")
    assert pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache") == (
        ["a", ""],
        ["eins", ""],
    )


@pytest.mark.parametrize("name", ["text", "tsv"])
def test_a_byte_order_mark_opening_a_file_is_not_text(tmp_path, name):
    root = tmp_path / "src"
    root.mkdir()
    bom = "\ufeff".encode()
    if name == "tsv":  # the header names its columns all the same
        (root / "train.tsv").write_bytes(bom + b"en\tde\r\na\tA\r\nb\tB\r\n")
    else:
        (root / "train.en").write_bytes(bom + b"a\nb\n")
        (root / "train.de").write_bytes(bom + b"A\r\nB\r\n")
    assert pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache") == (
        ["a", "b"],
        ["A", "B"],
    )


def test_lines_ending_in_cr_alone_are_refused_naming_the_file(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE)})
    (root / "train.de").write_bytes("\r".join(DE).encode() + b"\r")
    with pytest.raises(TranslatorError, match=r"train\.de.*CR alone.*LF"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


def test_a_file_named_gz_that_is_not_gzip_is_named(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE)})
    (root / "train.de").rename(root / "train.de.gz")  # plain text under a .gz name
    with pytest.raises(TranslatorError, match=r"train\.de\.gz: not a gzip file"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


def test_a_file_both_plain_and_gzipped_is_refused(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE)})
    (root / "train.de.gz").write_bytes(gzip.compress(b"old\n"))
    with pytest.raises(TranslatorError, match=r"both train\.de and train\.de\.gz"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


def test_a_directory_named_as_a_data_file_is_named_so(tmp_path):
    root = write_text_corpus(tmp_path / "src", {"train": (EN, DE)})
    (root / "train.de").unlink()
    (root / "train.de").mkdir()
    with pytest.raises(TranslatorError, match=r"train\.de: a directory, not a file"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


def test_a_source_directory_that_does_not_exist_is_named_so(tmp_path):
    with pytest.raises(TranslatorError, match=r"no such directory \(give a directory"):
        pairs(tiny_config(tmp_path / "nowhere", tmp_path / "data"), cache=tmp_path / "cache")


def test_a_broken_json_line_is_named_by_its_line_number(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    rows = [json.dumps({"en": f"a {i}", "de": f"b {i}"}) for i in range(12)]
    rows[9] = rows[9][:-5]  # cut short, as a truncated download would be
    (root / "train.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(TranslatorError, match=r"train\.jsonl:10: not a JSON object"):
        pairs(tiny_config(root, tmp_path / "data"), cache=tmp_path / "cache")


def test_local_sources_neither_reach_for_the_hub_nor_set_its_variables(tmp_path):
    """In a process without the offline variables and a hub address where nothing listens (a hub
    call fails there), every local format loads, and the process's environment is left as it
    was (a notebook's later hub load stays online)."""
    formats = write_all_formats(tmp_path / "src")
    script = f"""
import os
from pathlib import Path
from tests.data.conftest import tiny_config
from translator.data.corpus import load_split
for name, overrides in {formats!r}.items():
    cfg = tiny_config(Path({str(tmp_path / "src")!r}) / name, Path({str(tmp_path)!r}), *overrides)
    assert load_split(cfg.data, "train", Path({str(tmp_path / "cache")!r})).num_rows == {len(EN)}
print(sorted(k for k in os.environ if k.startswith("HF_")))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # the discard port: refused at once
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['HF_ENDPOINT']"
