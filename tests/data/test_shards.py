"""Flat id arrays: written in chunks == written at once, read back row by row, smallest dtype that
fits."""

from __future__ import annotations

import numpy as np
import pytest

from translator.data.shards import IdWriter, TokenArray, id_dtype, write_ids


def rows(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, rng.integers(0, 12)).tolist() for _ in range(n)]


@pytest.mark.parametrize("vocab", [8000, 65536, 70000])
def test_chunked_writer_equals_one_shot_and_reads_back(tmp_path, vocab):
    data = rows(500, vocab)
    write_ids(tmp_path / "once", data, vocab)
    with IdWriter(tmp_path / "chunks", vocab) as writer:
        for start in range(0, len(data), 77):
            writer.append(data[start : start + 77])
    for prefix in ("once", "chunks"):
        array = TokenArray(tmp_path / prefix)
        assert len(array) == len(data)
        assert [array[i] for i in range(len(data))] == data
        assert array.lengths.tolist() == [len(r) for r in data]
        assert array.ids.dtype == (np.uint16 if vocab <= 65536 else np.int32) == id_dtype(vocab)
    assert (tmp_path / "once.ids.npy").read_bytes() == (tmp_path / "chunks.ids.npy").read_bytes()
    assert not list(tmp_path.glob("*.raw"))


def test_chunks_larger_than_the_copy_buffer(tmp_path, monkeypatch):
    monkeypatch.setattr(IdWriter, "CHUNK", 7)
    data = rows(50, 100)
    write_ids(tmp_path / "ids", data, 100)
    assert [TokenArray(tmp_path / "ids")[i] for i in range(50)] == data


def test_empty_rows_and_empty_arrays(tmp_path):
    assert write_ids(tmp_path / "none", [], 100) == 0
    assert len(TokenArray(tmp_path / "none")) == 0
    write_ids(tmp_path / "blank", [[], []], 100)
    assert [TokenArray(tmp_path / "blank")[i] for i in range(2)] == [[], []]


def test_sentencepiece_sample_takes_size_kept_rows_the_same_for_a_seed():
    from translator.data.binarize import sample_mask

    keep = np.arange(100) % 3 != 0  # 66 kept rows
    take = sample_mask(keep, 10, seed=1)
    assert take.sum() == 10 and not (take & ~keep).any()  # only kept rows, exactly `size` of them
    assert (sample_mask(keep, 10, seed=1) == take).all() and (
        sample_mask(keep, 10, seed=2) != take
    ).any()
    assert (sample_mask(keep, 0, seed=1) == keep).all() and (
        sample_mask(keep, 500, seed=1) == keep
    ).all()


@pytest.mark.parametrize("vocab", [65536, 65537, 70000])
def test_ids_at_the_top_of_the_vocabulary_read_back(tmp_path, vocab):
    """uint16 holds ids up to 65535: a vocabulary one larger must switch to a wider type."""
    rows = [[vocab - 1, 4, vocab - 2]]
    write_ids(tmp_path / "ids", rows, vocab)
    assert TokenArray(tmp_path / "ids")[0] == rows[0]
