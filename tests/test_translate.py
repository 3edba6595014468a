"""Lines in, lines out: order, empty lines, n-best TSV, over-long lines, batching, streaming stdin."""

from __future__ import annotations

import copy
import dataclasses
import io
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from translator import checkpoint, translate
from translator.data.tokenizer import Tokenizer
from translator.errors import TranslatorError
from translator.model.transformer import Transformer

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
    """A random 2+2-layer, d_model 32 model with the prepared tokenizer, saved as a checkpoint."""
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


@pytest.mark.parametrize("beam_size", [1, 3])
def test_output_order_is_input_order(tiny, beam_size):
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size, batch_tokens=40)  # several batches
    batched = translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES, decode)
    alone = [translate.translate_lines(tiny.model, tiny.tokenizer, [line], decode)[0] for line in SENTENCES]
    assert [hyps[0][0] for hyps in batched] == [hyps[0][0] for hyps in alone]
    torch.testing.assert_close([h[0][1] for h in batched], [h[0][1] for h in alone], atol=1e-4, rtol=1e-4)
    assert len({hyps[0][0] for hyps in batched}) > 1  # the outputs differ, so a mix-up would show


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("cuda_graphs", [True, False])
def test_every_decode_setting_reaches_the_search(tiny, beam_size, cuda_graphs, monkeypatch):
    """decode.* (and so the translate/eval flags) arrive at greedy and beam search unchanged."""
    seen = []
    for name in ("greedy_search", "beam_search"):
        search = getattr(translate, name)
        monkeypatch.setattr(translate, name, lambda *a, _search=search, _name=name, **kw:
                            seen.append((_name, kw)) or _search(*a, **kw))
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size, length_penalty=1.7, max_len_a=0.9,
                                 max_len_b=7, min_len=2, cuda_graphs=cuda_graphs)
    translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES[:2], decode)
    expected = {"max_len_a": 0.9, "max_len_b": 7, "min_len": 2, "cuda_graphs": cuda_graphs}
    if beam_size > 1:
        expected.update(alpha=1.7, beam_size=beam_size)
    assert seen and {name for name, _ in seen} == {"greedy_search" if beam_size == 1 else "beam_search"}
    for _, kw in seen:
        assert {key: kw[key] for key in expected} == expected


def test_translate_flags_reach_the_decode_settings(tiny, monkeypatch):
    from typer.testing import CliRunner

    from translator import cli

    seen = {}
    monkeypatch.setattr(translate, "run", lambda model, tok, decode, lines, out, nbest, progress, alignment_layer:
                        seen.update(decode=decode, nbest=nbest, alignment_layer=alignment_layer))
    flags = ["--beam", "3", "--nbest", "2", "--length-penalty", "1.5", "--min-len", "2", "--max-len-a", "0.5",
             "--max-len-b", "6", "--batch-tokens", "99", "--no-cuda-graphs", "--device", "cpu", "-q"]
    result = CliRunner().invoke(cli.app, ["translate", str(tiny.path), *flags], input="A dog.\n")
    assert result.exit_code == 0, result.output
    decode = seen["decode"]
    assert (decode.beam_size, decode.length_penalty, decode.min_len, decode.max_len_a, decode.max_len_b,
            decode.batch_tokens, decode.cuda_graphs, seen["nbest"]) == (3, 1.5, 2, 0.5, 6, 99, False, 2)
    assert seen["alignment_layer"] is None  # no --alignments: no alignment pass
    for extra, layer in [(["--alignments"], -1), (["--alignments", "--alignment-layer", "1"], 1)]:
        result = CliRunner().invoke(cli.app, ["translate", str(tiny.path), *flags, *extra], input="A dog.\n")
        assert result.exit_code == 0 and seen["alignment_layer"] == layer, result.output


def test_empty_lines_give_empty_lines(tiny):
    lines = ["", SENTENCES[0], "   ", "", SENTENCES[1], "\t"]
    out = translate.translate_lines(tiny.model, tiny.tokenizer, lines, tiny.cfg.decode)
    assert len(out) == len(lines)
    assert [hyps[0][0] == "" for hyps in out] == [True, False, True, True, False, True]


def test_run_writes_one_line_per_input_line(tiny):
    chunks = [["", SENTENCES[0]], [SENTENCES[1], "", ""], [SENTENCES[2]]]
    out = io.StringIO()
    assert translate.run(tiny.model, tiny.tokenizer, tiny.cfg.decode, iter(chunks), out) == 6
    lines = out.getvalue().split("\n")
    assert len(lines) == 7 and lines[-1] == ""  # six lines, each ended by a newline
    assert lines[0] == lines[3] == lines[4] == "" and lines[1] and lines[2]


def test_nbest_tsv_is_numbered_and_sorted(tiny):
    out = io.StringIO()
    translate.run(tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([[SENTENCES[0], "", SENTENCES[1]]]), out, nbest=3)
    rows = [line.split("\t") for line in out.getvalue().splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 2, 2, 2]
    assert rows[3][1:] == ["", "0.0000"]
    for first in (0, 4):
        scores = [float(r[2]) for r in rows[first:first + 3]]
        assert scores == sorted(scores, reverse=True)


def test_split_long_cuts_at_sentence_ends_then_word_starts(tiny):
    text = "Two dogs play in the snow. " * 3 + "A man rides a bike down a very long and winding road."
    ids = tiny.tokenizer.encode([text])[0]
    pieces = tiny.tokenizer.sp.id_to_piece(ids)
    parts = translate.split_long(ids, 12, pieces)
    assert [i for part in parts for i in part] == ids and all(0 < len(p) <= 12 for p in parts)
    texts = tiny.tokenizer.decode(parts)
    assert texts[:3] == ["Two dogs play in the snow."] * 3  # whole sentences where they fit
    assert all(tiny.tokenizer.sp.id_to_piece(p[0]).startswith("\u2581") for p in parts)  # no word is cut
    assert translate.split_long(list(range(30)), 7, ["x"] * 30) == [list(range(i, min(i + 7, 30))) for i in range(0, 30, 7)]


def test_over_long_line_is_translated_in_pieces_with_a_warning(tiny):
    long_line = " ".join(SENTENCES * 2)  # well over the model's 39 source tokens
    warnings = []
    out = translate.translate_lines(tiny.model, tiny.tokenizer, [SENTENCES[1], long_line], tiny.cfg.decode,
                                    warn=warnings.append)
    assert len(out) == 2 and len(warnings) == 1 and warnings[0].startswith("line 2: ")
    ids = tiny.tokenizer.encode([long_line])[0]
    parts = translate.split_long(ids, 39, tiny.tokenizer.sp.id_to_piece(ids))
    assert len(parts) > 1
    pieces = tiny.tokenizer.decode([hyps[0].tokens for hyps in translate.search(tiny.model, parts, tiny.cfg.decode)])
    assert out[1][0][0] == " ".join(pieces)  # the pieces' translations, joined


def test_run_numbers_over_long_lines_across_chunks(tiny, capsys):
    long_line = " ".join(SENTENCES * 2)
    out = io.StringIO()
    translate.run(tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([["a", "b"], ["", long_line]]), out)
    assert len(out.getvalue().splitlines()) == 4
    assert capsys.readouterr().err.startswith("warning: line 4: ")


def test_run_progress_counts_sentences_over_all_chunks(tiny):
    """done never decreases and ends at what was read: empty lines aside, long lines' pieces apart."""
    long_line = " ".join(SENTENCES * 2)
    ids = tiny.tokenizer.encode([long_line])[0]
    pieces = len(translate.split_long(ids, 39, tiny.tokenizer.sp.id_to_piece(ids)))
    chunks = [SENTENCES[:5], ["", long_line], [], SENTENCES[5:]]
    decode = dataclasses.replace(tiny.cfg.decode, batch_tokens=40)  # several batches per chunk
    seen = []
    translate.run(tiny.model, tiny.tokenizer, decode, iter(chunks), io.StringIO(), progress=lambda *p: seen.append(p))
    done = [d for d, _ in seen]
    assert done == sorted(done) and all(d <= t for d, t in seen)
    assert seen[-1] == (len(SENTENCES) + pieces,) * 2
    assert (5, 5) in seen  # the first chunk's total, before the second is read


@pytest.mark.parametrize("quiet, stdin, stdout, stderr, shown", [
    (False, False, False, True, True),  # cat in | translate > out, watched on a terminal
    (True, False, False, True, False),  # --quiet
    (False, True, False, True, False),  # typed interactively
    (False, False, True, True, False),  # output on the same screen
    (False, False, False, False, False),  # stderr to a log
])
def test_progress_bar_only_for_redirected_bulk_work_on_a_terminal(quiet, stdin, stdout, stderr, shown):
    tty = lambda is_tty: SimpleNamespace(isatty=lambda: is_tty)  # noqa: E731
    assert translate.show_progress(quiet, tty(stdin), tty(stdout), tty(stderr)) is shown


def test_length_batches_cover_every_index_within_the_budget():
    lengths = [5, 1, 9, 3, 3, 12, 7, 2, 40, 6]
    batches = list(translate.length_batches(lengths, batch_tokens=24))
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths, reverse=True)
    for batch in batches:
        assert len(batch) == 1 or len(batch) * (max(lengths[i] for i in batch) + 1) <= 24


def _no_hang(signum, frame):
    raise TimeoutError("read_chunks waited for input that was never coming")


def test_read_chunks_yields_what_is_there_without_waiting_for_more():
    read_fd, write_fd = os.pipe()
    previous = signal.signal(signal.SIGALRM, _no_hang)
    signal.alarm(20)  # a reader that waits for more input would block this test forever
    try:
        with os.fdopen(read_fd, "r") as reader:
            chunks = translate.read_chunks(reader, max_lines=3)
            os.write(write_fd, b"first\n")
            assert next(chunks) == ["first"]  # the writer is still open: an interactive user gets an answer
            os.write(write_fd, b"a\nb\n\nc\nd")
            assert next(chunks) == ["a", "b", ""]  # bulk input is batched, max_lines at a time
            assert next(chunks) == ["c"]
            os.close(write_fd)
            assert list(chunks) == [["d"]]  # a last line without its newline
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_read_chunks_replaces_bytes_that_are_not_utf8_and_names_the_line():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"caf\xc3\xa9\r\ncaf\xe9\n")  # line 1 UTF-8 (CRLF), line 2 Latin-1
    os.write(write_fd, b"ok\n\xff")  # line 4 without a newline: numbering goes on across reads
    os.close(write_fd)
    warnings: list[str] = []
    with os.fdopen(read_fd, "r") as reader:
        lines = [line for chunk in translate.read_chunks(reader, warn=warnings.append) for line in chunk]
    assert lines == ["caf\u00e9", "caf\ufffd", "ok", "\ufffd"]  # one line per input line, none dropped
    assert [w.split(":")[0] for w in warnings] == ["line 2", "line 4"]
    assert "invalid UTF-8 at byte 3" in warnings[0]


def test_read_chunks_from_a_stream_without_a_file_descriptor():
    assert list(translate.read_chunks(io.StringIO("a\n\nb\r\nc\n"), max_lines=2)) == [["a", ""], ["b", "c"]]


def test_a_beam_wider_than_the_vocabulary_is_refused(tiny):
    vocab = tiny.cfg.model.vocab_size
    wide = dataclasses.replace(tiny.cfg.decode, beam_size=vocab + 1)
    with pytest.raises(TranslatorError, match=f"wider than the vocabulary \\({vocab} tokens\\)"):
        translate.translate_lines(tiny.model, tiny.tokenizer, ["A dog."], wide)
    with pytest.raises(TranslatorError, match="wider than the vocabulary"):
        translate.translate_lines(tiny.model, tiny.tokenizer, ["A dog."], tiny.cfg.decode, nbest=vocab + 1)


def test_device_and_dtype_names():
    assert translate.resolve_device("cpu").type == "cpu"
    assert translate.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert translate.resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert translate.resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(TranslatorError, match="dtype"):
        translate.resolve_dtype("half", torch.device("cpu"))
    for name in ("gpu", "mps", "meta", "xpu"):
        with pytest.raises(TranslatorError, match="device"):
            translate.resolve_device(name)
    if not torch.cuda.is_available():
        with pytest.raises(TranslatorError, match="CUDA"):
            translate.resolve_device("cuda")


def test_load_puts_the_model_in_the_asked_dtype_and_it_translates(tiny):
    model, cfg, tokenizer = translate.load(tiny.path, "cpu", "bf16")
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training
    out = translate.translate_lines(model, tokenizer, ["", SENTENCES[0]], cfg.decode)
    assert out[0][0][0] == "" and len(out) == 2


@pytest.mark.parametrize("flags, where", [(["--max-len-a", "0", "--max-len-b", "0"], "decode.max_len_b"),
                                          (["--batch-tokens", "0"], "--batch-tokens")])
def test_translate_refuses_impossible_decoding_flags(tiny, flags, where):
    result = subprocess.run([sys.executable, "-m", "translator", "translate", str(tiny.path), *flags],
                            input="A dog.\n", capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and result.stdout == "" and "Traceback" not in result.stderr
    assert where in result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_is_a_one_line_error(tiny):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "translator", "translate", str(tiny.path), "-q"],
                                input="A dog.\n", stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 1 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "No space left on device" in result.stderr


def test_translate_streams_through_a_pipe(tiny):
    """A subprocess answers a line before its stdin is closed (as an interactive user needs)."""
    # PYTHONUNBUFFERED in the caller's shell would hide a missing flush; the test must see our own.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"} | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "translator", "translate", str(tiny.path), "--device", "cpu"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        proc.stdin.write(SENTENCES[1] + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no answer within 120 s while stdin stayed open"
        first = proc.stdout.readline()
        assert first.endswith("\n") and proc.poll() is None  # answered; still waiting for more input
        proc.stdin.write("\n" + SENTENCES[0] + "\n")
        proc.stdin.close()
        rest = proc.stdout.read().split("\n")
        assert proc.wait(60) == 0, proc.stderr.read()
        assert rest[0] == "" and rest[1] and rest[2:] == [""]
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_translate_lines_on_cuda(tiny, dtype):
    model, cfg, tokenizer = translate.load(tiny.path, "auto", dtype)
    assert next(model.parameters()).is_cuda
    for beam_size in (1, 4):
        cfg.decode.beam_size = beam_size
        out = translate.translate_lines(model, tokenizer, ["", *SENTENCES], cfg.decode, nbest=2 if beam_size > 1 else 1)
        assert len(out) == len(SENTENCES) + 1 and out[0][0][0] == ""




def test_an_over_long_lines_score_is_the_sum_of_its_pieces(tiny):
    long_line = " ".join(SENTENCES * 2)
    ids = tiny.tokenizer.encode([long_line])[0]
    parts = translate.split_long(ids, 39, tiny.tokenizer.sp.id_to_piece(ids))
    for beam_size, nbest in ((1, 1), (3, 2)):
        decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size)
        out = translate.translate_lines(tiny.model, tiny.tokenizer, [long_line], decode, nbest=nbest)
        expected = sum(hyps[0].score for hyps in translate.search(tiny.model, parts, decode))
        assert len(out[0]) == 1 and out[0][0][1] == pytest.approx(expected, abs=1e-4)  # one joined hypothesis


def test_only_lines_over_the_limit_are_split(tiny):
    limit = tiny.cfg.model.max_positions - 1
    by_length = {len(ids): text for text, ids in
                 ((text, tiny.tokenizer.encode([text])[0]) for text in (" ".join(["dog"] * n) for n in range(1, 2 * limit)))}
    warnings = []
    out = translate.translate_lines(tiny.model, tiny.tokenizer, [by_length[limit], by_length[limit + 1]],
                                    tiny.cfg.decode, warn=warnings.append)
    assert len(out) == 2 and [w.split(":")[0] for w in warnings] == ["line 2"]


def test_read_chunks_numbers_invalid_utf8_lines_across_reads(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"a\n" * 40000 + b"caf\xe9\n" + b"b\n")  # more than one 64 KiB os.read
    warnings = []
    with open(path) as reader:
        lines = [line for chunk in translate.read_chunks(reader, warn=warnings.append) for line in chunk]
    assert len(lines) == 40002 and lines[40000] == "caf\ufffd" and lines[-1] == "b"
    assert [w.split(":")[0] for w in warnings] == ["line 40001"]


def test_nbest_rows_keep_three_fields_when_a_translation_holds_a_tab(tiny, monkeypatch):
    """With data.byte_fallback a model can emit <0x09>; the TSV must still have three columns."""
    monkeypatch.setattr(translate, "translate_lines", lambda *a, **k: [[("a\tb", -1.0), ("c", -2.5)], [("", 0.0)]])
    out = io.StringIO()
    translate.run(tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([["x", ""]]), out, nbest=2)
    assert [r.split("\t") for r in out.getvalue().splitlines()] == [["0", "a b", "-1.0000"], ["0", "c", "-2.5000"],
                                                                    ["1", "", "0.0000"]]


def test_load_takes_the_device_flag_over_the_checkpoints(tiny, monkeypatch):
    seen = []
    monkeypatch.setattr(translate, "resolve_device", lambda name: seen.append(name) or torch.device("cpu"))
    translate.load(tiny.path)
    translate.load(tiny.path, "cuda:1", "fp32")
    assert seen == ["cpu", "cuda:1"]  # None falls back to the checkpoint's decode.device; a flag wins


def test_translate_device_dtype_and_quiet_flags_reach_load_and_the_bar(tiny, monkeypatch):
    from typer.testing import CliRunner

    from translator import cli

    loads, quiets = [], []
    real_load = translate.load
    monkeypatch.setattr(translate, "load", lambda ckpt, device, dtype:
                        loads.append((device, dtype)) or real_load(ckpt, "cpu", "fp32"))
    monkeypatch.setattr(translate, "show_progress", lambda quiet, *streams: quiets.append(quiet) or False)
    monkeypatch.setattr(translate, "run", lambda *a, **k: 0)
    for flags in (["--device", "cuda:3", "--dtype", "fp16", "-q"], []):
        result = CliRunner().invoke(cli.app, ["translate", str(tiny.path), *flags], input="")
        assert result.exit_code == 0, result.output
    assert loads == [("cuda:3", "fp16"), (None, None)] and quiets == [True, False]
