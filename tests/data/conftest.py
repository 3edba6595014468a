"""Small corpora written into tmp_path, and a tiny data config that prepares them in about a
second."""

from __future__ import annotations

from pathlib import Path

import pytest

from translator import config

REPO = Path(__file__).resolve().parents[2]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def multi30k_lines(name: str, lang: str, count: int, skip: int = 0) -> list[str]:
    # imported here: tests/conftest.py sets the hub's offline variables, which a test that runs
    # this module in a clean process must not get
    from tests.conftest import require_multi30k

    require_multi30k()
    with open(MULTI30K / f"{name}.{lang}", encoding="utf-8") as handle:
        return handle.read().splitlines()[skip : skip + count]


def write_text_corpus(
    root: Path, splits: dict[str, tuple[list[str], list[str]]], langs=("en", "de")
) -> Path:
    """root/{split}.{lang}, one sentence per line."""
    root.mkdir(parents=True, exist_ok=True)
    for split, sides in splits.items():
        for lang, lines in zip(langs, sides):
            (root / f"{split}.{lang}").write_text(
                "".join(line + "\n" for line in lines), encoding="utf-8"
            )
    return root


def small_splits(train: int = 300) -> dict[str, tuple[list[str], list[str]]]:
    """Real Multi30k sentences: `train` training pairs, 40 valid and 30 test pairs."""
    return {
        "train": (
            multi30k_lines("train", "en", train, 100),
            multi30k_lines("train", "de", train, 100),
        ),
        "valid": (multi30k_lines("valid", "en", 40), multi30k_lines("valid", "de", 40)),
        "test": (multi30k_lines("test2016", "en", 30), multi30k_lines("test2016", "de", 30)),
    }


def tiny_config(source: Path | str, data_dir: Path, *overrides: str) -> config.Config:
    """A data config that trains a 200-piece SentencePiece model: seconds for a few hundred
    pairs."""
    return config.load(
        None,
        [
            f"data.source={source}",
            f"data.data_dir={data_dir}",
            "data.name=small",
            "data.splits.valid=valid",
            "data.vocab_size=200",
            *overrides,
        ],
    )


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_text_corpus(tmp_path / "corpus", small_splits())
