"""Local files that are almost right: records of uneven shape, a header row beside
data.tsv_columns, empty held-out records, values that are not text, UTF-16 text."""

from __future__ import annotations

import json

import datasets
import pytest

from tests.data.conftest import tiny_config
from translator.data.corpus import load_split, pair_batches
from translator.errors import TranslatorError


def load(tmp_path, files: dict[str, str | bytes], split="train", *overrides: str):
    """The (sources, targets) of `split` from a directory holding `files`."""
    root = tmp_path / "src"
    root.mkdir(parents=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (root / name).write_bytes(data)
    cfg = tiny_config(root, tmp_path / "data", *overrides)
    table = load_split(cfg.data, split, tmp_path / "cache")
    src, tgt = [], []
    for batch_src, batch_tgt in pair_batches(table, "en", "de"):
        src += batch_src
        tgt += batch_tgt
    return src, tgt


def jsonl(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def wmt(**sides) -> dict:
    return {"translation": sides}


def test_wmt_records_missing_a_language_or_with_another_one_read_like_flat_ones(tmp_path):
    # `datasets` reads a struct whose keys differ between records as JSON text, not as a struct
    records = jsonl(wmt(en="a", de="b"), wmt(en="c"), wmt(en="e", de="f", zz="g"), {})
    assert load(tmp_path, {"train.jsonl": records}) == (["a", "c", "e", ""], ["b", "", "f", ""])


def test_wmt_records_of_uneven_shape_name_what_is_wrong(tmp_path):
    records = jsonl(wmt(en="a", fr="b"), wmt(en="c", fr="d", zz="e"))
    with pytest.raises(TranslatorError, match=r"train.jsonl: language 'de' not in .*en, fr, zz"):
        load(tmp_path / "missing", {"train.jsonl": records})
    records = jsonl(wmt(en="a", de="b"), wmt(en="c"), wmt(en="e", de=["f"]))
    with pytest.raises(TranslatorError, match=r"train.jsonl:3: the 'de' value is not text"):
        load(tmp_path / "list", {"train.jsonl": records})
    records = jsonl(wmt(en="a", de="b"), wmt(en="c"), {"translation": "e"})
    with pytest.raises(TranslatorError, match=r"train.jsonl:3: 'translation' is not a record"):
        load(tmp_path / "string", {"train.jsonl": records})


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_a_header_row_is_skipped_when_tsv_columns_names_the_same_columns(tmp_path, split):
    files = {f"{split}.tsv": "de\ten\nhallo\thello\nja\tyes\n"}
    pairs = (["hello", "yes"], ["hallo", "ja"])
    assert load(tmp_path / "header", files, split, "data.tsv_columns=de,en") == pairs
    assert load(tmp_path / "spaces", files, split, "data.tsv_columns= de , en") == pairs
    headerless = {f"{split}.tsv": "hallo\thello\nja\tyes\n"}
    assert load(tmp_path / "bare", headerless, split, "data.tsv_columns=de,en") == pairs


def test_a_header_row_in_another_order_than_tsv_columns_is_refused(tmp_path):
    files = {"train.tsv": "de\ten\nhallo\thello\n"}
    with pytest.raises(TranslatorError, match=r"train.tsv:1: .*another order \(de, en\)"):
        load(tmp_path, files, "train", "data.tsv_columns=en,de")


@pytest.mark.parametrize(
    "files",
    [
        {"valid.jsonl": jsonl(wmt(en="a", de="b"), {}, {"translation": None}, wmt(en=" ", de="c"))},
        {
            "valid.jsonl": jsonl(
                {"en": "a", "de": "b"}, {}, {"en": None, "de": ""}, {"en": " ", "de": "c"}
            )
        },
        {"valid.en": "a\n\n\n \n", "valid.de": "b\n\n\nc\n"},
    ],
)
def test_empty_held_out_pairs_are_kept_and_counted(tmp_path, files, capsys):
    # kept: the lines must match the references; counted: they are scored, so say so
    assert load(tmp_path, files, "valid") == (["a", "", "", " "], ["b", "", "", "c"])
    assert capsys.readouterr().err.startswith("warning: ")
    warnings = []
    cfg = tiny_config(tmp_path / "src", tmp_path / "data")
    load_split(cfg.data, "valid", tmp_path / "cache", warn=warnings.append)
    assert len(warnings) == 1 and "(valid): 3 of 4 pairs have an empty side" in warnings[0]


def test_a_held_out_split_without_empty_sides_gives_no_warning(tmp_path, capsys):
    load(tmp_path, {"test.jsonl": jsonl(wmt(en="a", de="b"))}, "test")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "records",
    [
        [{"en": "a", "de": "b"}, {"en": "c"}, {"en": "d", "de": 4}, {"en": "e", "de": "f"}],
        [{"en": "a", "de": "b"}, {"en": "c", "de": None}, {"en": "d", "de": {"x": 1}}],
        [{"en": "a", "de": 1}, {"en": "c", "de": 2}, {"en": "d", "de": 3}],
        [wmt(en="a", de="b"), wmt(en="c", de=None), wmt(en="d", de=4.5)],
    ],
)
def test_a_value_that_is_not_text_is_named_by_its_line(tmp_path, records):
    files = {"train.jsonl": "\n" + jsonl(*records)}  # a blank line: Arrow's rows are not lines
    first = 1 + next(n for n, r in enumerate(records, 1) if not isinstance(_de(r), str | None))
    with pytest.raises(TranslatorError, match=rf"train.jsonl:{first}: the 'de' value is not text"):
        load(tmp_path, files)


def _de(record: dict):
    return record.get("translation", record).get("de")


@pytest.mark.parametrize("encoding", ["UTF-16LE", "UTF-16BE", "UTF-32LE", "UTF-32BE", "UTF-16"])
@pytest.mark.parametrize("name", ["dev.de", "dev.tsv", "dev.jsonl"])
def test_a_utf16_or_utf32_file_is_named_with_its_encoding(tmp_path, encoding, name):
    sentences = [f"Satz Nummer {i} — schön" for i in range(100)]
    text = {
        "dev.de": "".join(s + "\n" for s in sentences),
        "dev.tsv": "en\tde\n" + "".join(f"s\t{s}\n" for s in sentences),
        "dev.jsonl": jsonl(*({"en": "s", "de": s} for s in sentences)),
    }[name]
    files = {name: text.encode(encoding), "dev.en": "s\n" * 100}
    shown = {"UTF-16": "UTF-16LE"}.get(encoding, encoding)  # Python writes a BOM, then LE
    with pytest.raises(TranslatorError, match=rf"{name}: looks like {shown} \(NUL bytes\)"):
        load(tmp_path, files, "dev")


def test_a_stray_nul_in_utf8_text_is_left_to_the_cleaner(tmp_path):
    files = {"dev.en": "a\x00b\n\x00\nc\n", "dev.de": "x\ny\nz\n"}
    assert load(tmp_path, files, "dev") == (["a\x00b", "\x00", "c"], ["x", "y", "z"])
    files = {"dev.en": "Hallo Welt\x00\nZweite Zeile\n", "dev.de": "x\ny\n"}  # beside "\n"
    assert load(tmp_path / "b", files, "dev") == (["Hallo Welt\x00", "Zweite Zeile"], ["x", "y"])


@pytest.mark.parametrize("encoding", ["UTF-16LE", "UTF-16BE"])
def test_utf16_chinese_with_few_nul_bytes_is_named_too(tmp_path, encoding):
    text = "".join(f"第{i}句话在上海\n" for i in range(50))  # 上 is U+4E0A: a "\n" byte in it
    files = {"dev.de": text.encode(encoding), "dev.en": "s\n" * 50}
    with pytest.raises(TranslatorError, match=rf"looks like {encoding} \(NUL bytes\)"):
        load(tmp_path, files, "dev")


def test_a_saved_dataset_whose_translation_is_not_a_record_is_refused(tmp_path):
    saved = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"translation": ["a"]})})
    saved.save_to_disk(str(tmp_path / "saved"))
    cfg = tiny_config(tmp_path / "saved", tmp_path / "data")
    with pytest.raises(TranslatorError, match=r"\(train\): 'translation' is not a record .*string"):
        load_split(cfg.data, "train", tmp_path / "cache")


def test_tsv_column_names_are_read_without_their_spaces_and_must_differ(tmp_path):
    spaced = {"train.tsv": "en \t de\nhello\thallo\n"}  # a stray space around a name
    assert load(tmp_path / "spaced", spaced) == (["hello"], ["hallo"])
    twice = {"train.tsv": "id\tid\ten\tde\n1\t2\thello\thallo\n"}
    with pytest.raises(TranslatorError, match=r"train.tsv:1: column 'id' is named twice"):
        load(tmp_path / "twice", twice)
    with pytest.raises(TranslatorError, match=r"data.tsv_columns: column 'en' is named twice"):
        load(tmp_path / "given", {"train.tsv": "a\tb\tc\n"}, "train", "data.tsv_columns=en,en,de")


@pytest.mark.parametrize("damaged", ["dataset_dict.json", "train/state.json"])
def test_a_saved_dataset_with_damaged_metadata_is_one_line(tmp_path, damaged):
    saved = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"en": ["a"], "de": ["b"]})})
    saved.save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "saved" / damaged).write_text('{"bad json')
    cfg = tiny_config(tmp_path / "saved", tmp_path / "data")
    with pytest.raises(TranslatorError, match="metadata cannot be read") as err:
        load_split(cfg.data, "train", tmp_path / "cache")
    assert err.value.where == str(tmp_path / "saved") and "save_to_disk" in err.value.fix


def test_json_lines_that_are_not_records_or_no_records_at_all_are_named(tmp_path):
    with pytest.raises(TranslatorError, match=r"train.jsonl:2: not a JSON object"):
        load(tmp_path / "list", {"train.jsonl": jsonl({"en": "a", "de": "b"}, [1, 2])})
    with pytest.raises(TranslatorError, match=r"train.jsonl: no records"):
        load(tmp_path / "blank", {"train.jsonl": "\n\n"})
    array = {"train.jsonl": json.dumps([{"en": "a", "de": "b"}, {"en": "c", "de": "d"}]) + "\n"}
    assert load(tmp_path / "array", array) == (["a", "c"], ["b", "d"])  # one JSON array: read
    # an array after the first line is a line that is not a record
    lines = jsonl({"en": "a", "de": "b"}, [{"en": "c", "de": "d"}])
    with pytest.raises(TranslatorError, match=r"train.jsonl:2: not a JSON object"):
        load(tmp_path / "later-array", {"train.jsonl": lines})
    # one array on one line, holding something else than records: its line is named
    mixed = {"train.jsonl": json.dumps([{"en": "a", "de": "b"}, 3]) + "\n"}
    with pytest.raises(TranslatorError, match=r"train.jsonl:1: not a JSON object"):
        load(tmp_path / "mixed-array", mixed)
    # an array over several lines is read as one: a bad value in it is named as such
    spread = '[\n{"en": "a", "de": "b"},\n{"en": 2, "de": "d"}\n]\n'
    with pytest.raises(TranslatorError, match=r"the 'en' value is not text"):
        load(tmp_path / "spread-array", {"train.jsonl": spread})
