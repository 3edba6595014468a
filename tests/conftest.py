"""Shared fixtures: the real Multi30k files from ../shared/data, a tiny config, a prepared 2k-pair
slice."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from translator import config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
MULTI30K = SHARED_DATA / "multi30k"


def tiny_overrides(data_dir: Path, run_dir: Path, source: Path | str = MULTI30K) -> list[str]:
    """Overrides that make configs/tiny.yaml a seconds-long run on a 2k-pair Multi30k slice."""
    return [
        f"data.source={source}",
        "data.splits.valid=valid",
        "data.splits.test=test2016",
        f"data.data_dir={data_dir}",
        "data.max_train_pairs=2000",
        "data.vocab_size=1000",
        "model.d_model=64",
        "model.d_ff=128",
        "model.n_heads=4",
        "model.max_positions=128",
        f"train.run_dir={run_dir}",
        "train.max_updates=6",
        "train.eval_every=3",
        "train.log_every=2",
        "train.warmup_steps=2",
        "train.max_tokens=1024",
        "train.valid_bleu_sentences=20",
    ]


def other_vocabulary(payload: dict) -> None:
    """A tokenizer with another checksum, as a checkpoint of another vocabulary has: the same
    model plus an unknown protobuf field (1000, varint 1), which SentencePiece still loads."""
    proto = payload["tokenizer"]["proto"] + b"\xc0\x3e\x01"
    payload["tokenizer"].update(proto=proto, sha256=hashlib.sha256(proto).hexdigest())


def pytest_collection_modifyitems(config, items) -> None:
    """`cuda`-marked tests skip where there is no CUDA GPU (the marker alone says so)."""
    if torch.cuda.is_available():
        return
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(no_gpu)


def require_multi30k() -> Path:
    """The shared Multi30k files the tests read, or a failure that says where they go."""
    if not (MULTI30K / "train.en").is_file():
        pytest.fail(
            f"the shared Multi30k files are missing: expected {MULTI30K}/train.en (see README.md, "
            "Development: the tests read ../shared/data/multi30k beside the checkout)"
        )
    return MULTI30K


@pytest.fixture(scope="session")
def multi30k() -> Path:
    return require_multi30k()


# the session's prepared data validates and tests on the first lines of Multi30k's own sets:
# every validation, eval and recipe choice in the suite decodes these, not ~1,000 sentences
HELD_OUT_LINES = 200


def multi30k_slice(folder: Path) -> Path:
    """`folder` as a corpus directory: Multi30k's train (linked), and the first HELD_OUT_LINES
    lines of valid and test2016."""
    folder.mkdir()
    for lang in ("en", "de"):
        (folder / f"train.{lang}").symlink_to(MULTI30K / f"train.{lang}")
        for split in ("valid", "test2016"):
            with open(MULTI30K / f"{split}.{lang}", encoding="utf-8") as whole:
                head = [line for _, line in zip(range(HELD_OUT_LINES), whole)]
            (folder / f"{split}.{lang}").write_text("".join(head), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def prepared(multi30k, tmp_path_factory) -> config.Config:
    """configs/tiny.yaml shrunk to a 2k-pair slice (held-out sets of HELD_OUT_LINES) and
    prepared once for the whole session; its data.source is the slice's folder."""
    from translator import prepare

    root = tmp_path_factory.mktemp("prepared")
    source = multi30k_slice(root / "multi30k")
    overrides = tiny_overrides(root / "data", root / "run", source)
    cfg = config.load(REPO / "configs" / "tiny.yaml", overrides)
    prepare.run(cfg, quiet=True)
    return cfg


@pytest.fixture(scope="session")
def opus(multi30k, tmp_path_factory):
    """An OPUS-MT style directory with a random MarianMT model -> (dir, HF model, HF tokenizer)."""
    transformers = pytest.importorskip(
        "transformers", reason="the bench extra (transformers) is not installed"
    )
    from tests.hf_marian import build_opus

    root = tmp_path_factory.mktemp("opus")
    return root, *build_opus(root, multi30k, transformers)


@pytest.fixture(scope="session")
def opus_separate(multi30k, tmp_path_factory):
    """The same with separate source and target vocabularies (vocab.json, target_vocab.json)."""
    transformers = pytest.importorskip(
        "transformers", reason="the bench extra (transformers) is not installed"
    )
    from tests.hf_marian import build_opus

    root = tmp_path_factory.mktemp("opus-separate")
    return root, *build_opus(root, multi30k, transformers, separate=True)


@pytest.fixture(scope="session", autouse=True)
def _event_files_in_creation_order():
    """TensorBoard reads a folder's event files in name order: creation second, host, process,
    then a count of the process's files, compared as text (...9 after ...11). The tests start
    several training sessions a second in one process, so a resumed run's files could be read
    out of order and its first session's start purge the second's points: counts of one width
    keep the names in creation order."""
    from tensorboard.summary.writer import event_file_writer

    event_file_writer._global_uid = event_file_writer.AtomicCounter(10**6)


@pytest.fixture(scope="session", autouse=True)
def _one_thread_everywhere():
    """One thread for module and session fixtures too (they start before the per-test fixture
    below), and for every command a test starts as a subprocess (OMP_NUM_THREADS): a fixture's
    training at two threads against the other xdist worker was measured 18x slower."""
    threads, before = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(threads)
    if before is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = before


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    """Seeded, and one intra-op thread: tiny models gain nothing from two, and two OpenMP threads
    spin-waiting against any other job on a 2-core machine were measured 10-20x slower."""
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def without_length_warnings(err: str) -> str:
    """stderr without the warning that outputs ran to the length limit, as a random model's do
    (it seldom emits EOS)."""
    return "".join(
        line for line in err.splitlines(keepends=True) if "stopped at the length limit" not in line
    )


SENTENCES = [
    "A man in a blue shirt is playing the guitar on a stage.",
    "Two dogs.",
    "A little girl climbs into a wooden playhouse while her father watches from the porch.",
    "People are walking down the street.",
    "A woman.",
    "Several men in hard hats are operating a giant pulley system.",
    "A boy jumps.",
    "A black dog and a spotted dog are fighting",
]


@pytest.fixture(scope="module")
def tiny(prepared, tmp_path_factory):
    """A random 2+2-layer, d_model 32 model with the prepared tokenizer, saved as a checkpoint
    (translate, stream)."""
    import copy
    from types import SimpleNamespace

    from translator import checkpoint
    from translator.data.tokenizer import Tokenizer
    from translator.model.transformer import Transformer

    cfg = copy.deepcopy(prepared)
    tokenizer = Tokenizer(Path(cfg.data.data_dir) / cfg.data.name / "spm.model")
    cfg.model.vocab_size, cfg.model.d_model, cfg.model.d_ff = tokenizer.vocab_size, 32, 64
    cfg.model.max_positions, cfg.model.tie_embeddings = 40, False
    cfg.decode.beam_size, cfg.decode.device, cfg.decode.dtype = 1, "cpu", "fp32"
    torch.manual_seed(0)
    model = Transformer(cfg.model).eval()
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    checkpoint.save(path, model, cfg, tokenizer)
    return SimpleNamespace(model=model, cfg=cfg, tokenizer=tokenizer, path=path)
