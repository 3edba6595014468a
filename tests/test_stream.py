"""The translate command's streams: chunks of stdin, one line out per line in, flushed; the progress
bar; its flags."""

from __future__ import annotations

import dataclasses
import io
import os
import select
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import SENTENCES, without_length_warnings
from translator import console, stream, translate
from translator.data import split
from translator.decode.sampling import Sampling
from translator.errors import TranslatorError
from translator.input_lines import lines_left
from translator.line_warnings import BYTE_FALLBACK


def test_translate_flags_reach_the_decode_settings(tiny, monkeypatch):
    from typer.testing import CliRunner

    from translator import cli

    seen = {}
    monkeypatch.setattr(
        stream,
        "translate_chunks",
        lambda model, tok, decode, lines, out, nbest, **named: seen.update(
            decode=decode, nbest=nbest, **named
        ),
    )
    monkeypatch.setattr(stream, "load_channel", lambda *a: "channel")  # loading is tested apart
    flags = [
        "--channel",
        "back.pt",
        "--beam",
        "3",
        "--nbest",
        "2",
        "--length-penalty",
        "1.5",
        "--min-len",
        "2",
        "--no-repeat-ngram-size",
        "3",
        "--unk-penalty",
        "2.5",
        "--max-len-a",
        "0.5",
        "--max-len-b",
        "6",
        "--batch-tokens",
        "99",
        "--no-cuda-graphs",
        "--channel-weight",
        "0.4",
        "--channel-candidates",
        "4",
        "--device",
        "cpu",
        "-q",
    ]
    result = CliRunner().invoke(cli.app, ["translate", str(tiny.path), *flags], input="A dog.\n")
    assert result.exit_code == 0, result.output
    decode = seen["decode"]
    assert (
        decode.beam_size,
        decode.length_penalty,
        decode.min_len,
        decode.no_repeat_ngram_size,
        decode.unk_penalty,
        decode.max_len_a,
        decode.max_len_b,
        decode.batch_tokens,
        decode.cuda_graphs,
        decode.channel_weight,
        decode.channel_candidates,
        seen["nbest"],
    ) == (3, 1.5, 2, 3, 2.5, 0.5, 6, 99, False, 0.4, 4, 2)
    assert seen["alignment_layer"] is None  # no --alignments: no alignment pass
    for extra, layer in [(["--alignments"], -1), (["--alignments", "--alignment-layer", "1"], 1)]:
        result = CliRunner().invoke(
            cli.app, ["translate", str(tiny.path), *flags, *extra], input="A dog.\n"
        )
        assert result.exit_code == 0 and seen["alignment_layer"] == layer, result.output
    assert seen["sampling"] is None and seen["prefix"] is False
    result = CliRunner().invoke(
        cli.app, ["translate", str(tiny.path), "--prefix", "-q"], input="A dog.\tEin\n"
    )
    assert result.exit_code == 0 and seen["prefix"] is True, result.output
    assert seen["constraints"] is False
    result = CliRunner().invoke(
        cli.app, ["translate", str(tiny.path), "--constraints", "-q"], input="A dog.\tHund\n"
    )
    assert result.exit_code == 0 and seen["constraints"] is True, result.output
    both = ["translate", str(tiny.path), "--constraints", "--prefix"]
    result = CliRunner().invoke(cli.app, both, input="A dog.\tHund\n")
    assert result.exit_code == 1 and "give one of them" in str(result.exception)
    drawn_terms = ["translate", str(tiny.path), "--constraints", "--sampling"]
    result = CliRunner().invoke(cli.app, drawn_terms, input="A dog.\n")  # refused before any line
    assert result.exit_code == 1 and "--sampling" in str(result.exception)
    drawn = ["--sampling", "--sampling-topk", "5", "--sampling-topp", "0.9", "--temperature", "0.7"]
    result = CliRunner().invoke(
        cli.app, ["translate", str(tiny.path), *drawn, "--seed", "3"], input="A dog.\n"
    )
    assert result.exit_code == 0, result.output
    assert seen["sampling"] == Sampling(temperature=0.7, top_k=5, top_p=0.9, seed=3)
    # flags that need another flag to mean anything are refused without it
    for alone, needs in [
        (["--alignment-layer", "1"], "--alignments"),
        (["--channel-weight", "0.4"], "--channel"),
        (["--channel-candidates", "4"], "--channel"),
        (["--seed", "1"], "--sampling"),
        (["--sampling-topk", "3"], "--sampling"),
        (["--temperature", "0.5"], "--sampling"),
    ]:
        result = CliRunner().invoke(cli.app, ["translate", str(tiny.path), *alone], input="")
        assert isinstance(result.exception, TranslatorError), result.output
        assert f"without {needs}" in str(result.exception)
    # and sampling refuses what it cannot do
    for clash in (
        ["--beam", "4"],
        ["--channel", "back.pt"],
    ):
        result = CliRunner().invoke(
            cli.app, ["translate", str(tiny.path), "--sampling", *clash], input=""
        )
        assert isinstance(result.exception, TranslatorError), result.output
    # a temperature outside what sampling takes is a usage error, with the range the help shows
    result = CliRunner().invoke(
        cli.app, ["translate", str(tiny.path), "--sampling", "--temperature", "0"], input=""
    )
    assert result.exit_code == 2 and "0.01" in result.output


def test_translate_device_dtype_and_quiet_flags_reach_load_and_the_bar(tiny, monkeypatch):
    from typer.testing import CliRunner

    from translator import cli

    loads, quiets = [], []
    real_load = stream.load_models
    monkeypatch.setattr(
        stream,
        "load_models",
        lambda ckpt, device, dtype: loads.append((device, dtype)) or real_load(ckpt, "cpu", "fp32"),
    )
    monkeypatch.setattr(
        stream, "show_progress", lambda quiet, *streams: quiets.append(quiet) or False
    )
    monkeypatch.setattr(stream, "translate_chunks", lambda *a, **k: 0)
    for flags in (["--device", "cuda:3", "--dtype", "fp16", "-q"], []):
        result = CliRunner().invoke(cli.app, ["translate", str(tiny.path), *flags], input="")
        assert result.exit_code == 0, result.output
    assert loads == [("cuda:3", "fp16"), (None, None)] and quiets == [True, False]


def test_run_writes_one_line_per_input_line(tiny):
    chunks = [["", SENTENCES[0]], [SENTENCES[1], "", ""], [SENTENCES[2]]]
    out = io.StringIO()
    assert (
        stream.translate_chunks(tiny.model, tiny.tokenizer, tiny.cfg.decode, iter(chunks), out) == 6
    )
    lines = out.getvalue().split("\n")
    assert len(lines) == 7 and lines[-1] == ""  # six lines, each ended by a newline
    assert lines[0] == lines[3] == lines[4] == "" and lines[1] and lines[2]


def test_nbest_tsv_is_numbered_and_sorted(tiny):
    out = io.StringIO()
    stream.translate_chunks(
        tiny.model,
        tiny.tokenizer,
        tiny.cfg.decode,
        iter([[SENTENCES[0], "", SENTENCES[1]]]),
        out,
        nbest=3,
    )
    rows = [line.split("\t") for line in out.getvalue().splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 2, 2, 2]
    # the empty line: one empty row, scored by the model (test_translate checks the value)
    assert rows[3][1] == "" and float(rows[3][2]) < 0
    for first in (0, 4):
        scores = [float(r[2]) for r in rows[first : first + 3]]
        assert scores == sorted(scores, reverse=True)


def test_nbest_1_gives_the_best_as_a_scored_row_and_no_nbest_the_text_alone(tiny):
    lines = [SENTENCES[0], "", SENTENCES[1]]
    plain, rows = io.StringIO(), io.StringIO()
    stream.translate_chunks(tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([lines]), plain)
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([lines]), rows, nbest=1
    )
    rows = [row.split("\t") for row in rows.getvalue().splitlines()]
    assert [r[0] for r in rows] == ["0", "1", "2"] and all(float(r[2]) <= 0 for r in rows)
    assert [r[1] for r in rows] == plain.getvalue().splitlines()


def test_nbest_rows_keep_three_fields_when_a_translation_holds_a_tab(tiny, monkeypatch):
    """With data.byte_fallback a model can emit <0x09>; the TSV must still have three columns."""
    monkeypatch.setattr(
        stream, "translate_lines", lambda *a, **k: [[("a\tb", -1.0), ("c", -2.5)], [("", 0.0)]]
    )
    out = io.StringIO()
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([["x", ""]]), out, nbest=2
    )
    assert [r.split("\t") for r in out.getvalue().splitlines()] == [
        ["0", "a b", "-1.0000"],
        ["0", "c", "-2.5000"],
        ["1", "", "0.0000"],
    ]


def test_run_numbers_over_long_lines_across_chunks(tiny, capsys):
    long_line = " ".join(SENTENCES * 2)
    out = io.StringIO()
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([["a", "b"], ["", long_line]]), out
    )
    assert len(out.getvalue().splitlines()) == 4
    assert without_length_warnings(capsys.readouterr().err).startswith("warning: line 4: ")


def progress_reports(tiny, chunks: list[list[str]], **options) -> list[tuple[int, int]]:
    """The (done, total) reports of translating `chunks`, several batches a chunk."""
    seen = []
    decode = dataclasses.replace(tiny.cfg.decode, batch_tokens=40)
    stream.translate_chunks(
        tiny.model,
        tiny.tokenizer,
        decode,
        iter(chunks),
        io.StringIO(),
        progress=lambda *p: seen.append(p),
        **options,
    )
    return seen


def test_run_progress_counts_sentences_over_all_chunks(tiny):
    """done never decreases and ends at what was read: empty lines aside, long lines' pieces
    apart."""
    long_line = " ".join(SENTENCES * 2)
    limit = split.piece_limit(tiny.cfg.model.max_positions, tiny.cfg.decode)

    def pieces(line: str) -> int:  # sequences translated for `line`
        ids = tiny.tokenizer.encode([line])[0]
        return len(split.split_long(ids, limit, tiny.tokenizer.sp.id_to_piece(ids)))

    seen = progress_reports(tiny, [SENTENCES[:5], ["", long_line], [], SENTENCES[5:]])
    done = [d for d, _ in seen]
    assert done == sorted(done) and all(d <= t for d, t in seen)
    assert seen[-1] == (sum(map(pieces, [*SENTENCES, long_line])),) * 2
    first = sum(map(pieces, SENTENCES[:5]))
    assert (first, first) in seen  # the first chunk's total, before the second is read


@pytest.mark.parametrize(
    "quiet, stdin, stdout, stderr, shown",
    [
        (False, False, False, True, True),  # cat in | translate > out, watched on a terminal
        (True, False, False, True, False),  # --quiet
        (False, True, False, True, False),  # typed interactively
        (False, False, True, True, False),  # output on the same screen
        (False, False, False, False, False),  # stderr to a log
    ],
)
def test_progress_bar_only_for_redirected_bulk_work_on_a_terminal(
    quiet, stdin, stdout, stderr, shown
):
    tty = lambda is_tty: SimpleNamespace(isatty=lambda: is_tty)  # noqa: E731
    assert console.show_progress(quiet, tty(stdin), tty(stdout), tty(stderr)) is shown


@pytest.mark.parametrize("env", ["FORCE_COLOR", "TTY_COMPATIBLE"])
def test_no_live_bar_in_a_log_with_colour_forced(tmp_path, monkeypatch, env):
    """`FORCE_COLOR=1 translator translate ... 2> log`: rich calls the file a terminal."""
    monkeypatch.setenv(env, "1")
    with open(tmp_path / "log", "w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        with console.sentence_progress("translate", quiet=False) as progress:
            for done in range(0, 2001, 100):
                progress(done, 2000)
    assert (tmp_path / "log").read_text() == ""


@pytest.mark.parametrize(
    "flags, where",
    [
        (["--max-len-a", "0", "--max-len-b", "0"], "decode.max_len_b"),
        (["--batch-tokens", "0"], "--batch-tokens"),
    ],
)
def test_translate_refuses_impossible_decoding_flags(tiny, flags, where):
    result = subprocess.run(
        [sys.executable, "-m", "translator", "translate", str(tiny.path), *flags],
        input="A dog.\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and result.stdout == "" and "Traceback" not in result.stderr
    assert where in result.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_is_a_one_line_error(tiny):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "translator", "translate", str(tiny.path), "-q"],
            input="A dog.\n",
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    err = without_length_warnings(result.stderr)
    assert result.returncode == 1 and err.startswith("error: ") and err.count("\n") == 1
    assert "<stdout>: cannot write the translations: No space left on device" in result.stderr


def test_translate_streams_through_a_pipe(tiny):
    """A subprocess answers a line before its stdin is closed (as an interactive user needs)."""
    # PYTHONUNBUFFERED in the caller's shell would hide a missing flush; the test must see our own.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"} | {
        "OMP_NUM_THREADS": "1"
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "translator", "translate", str(tiny.path), "--device", "cpu"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        proc.stdin.write(SENTENCES[1] + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no answer within 120 s while stdin stayed open"
        first = proc.stdout.readline()
        # answered; still waiting for more input
        assert first.endswith("\n") and proc.poll() is None
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


def test_unk_warnings_number_lines_across_chunks(tiny, monkeypatch, capsys):
    from tests.test_translate import fake_search
    from translator.data.tokenizer import UNK_ID

    first = tiny.tokenizer.encode(["Two dogs."])[0][0]
    monkeypatch.setattr(translate, "search", fake_search({first: [UNK_ID, UNK_ID + 100]}))
    out = io.StringIO()
    stream.translate_chunks(
        tiny.model,
        tiny.tokenizer,
        tiny.cfg.decode,
        iter([["People walk."], ["", "Two dogs."]]),
        out,
    )
    assert len(out.getvalue().splitlines()) == 3
    assert capsys.readouterr().err.startswith(
        "warning: 1 <unk> token (characters outside the vocabulary) dropped "
        "from the output of line 3;"
    )


def test_translate_in_int8_says_so_and_keeps_one_line_per_line(tiny):
    result = subprocess.run(
        [sys.executable, "-m", "translator", "translate", str(tiny.path), "--dtype", "int8"],
        input=f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2] and lines[3] == ""
    assert "translate: cpu, int8 (dynamic int8 linear layers" in result.stderr
    assert "deprecat" not in result.stderr.lower()  # PyTorch's notices about its own API stay out


def test_int8_on_cuda_is_a_one_line_error_with_or_without_a_gpu(tiny):
    result = subprocess.run(
        [sys.executable, "-m", "translator", "translate", str(tiny.path), "--dtype", "int8"]
        + ["--device", "cuda"],
        input="A dog.\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "int8 decoding runs on the CPU only" in result.stderr


def test_a_reader_that_leaves_the_pipe_ends_translate_quietly_with_exit_0(tiny):
    """`translate < in | head -1`: 0 whether or not a write meets the closed pipe (which depends on
    timing), no traceback and no "Exception ignored"."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "translator", "translate", str(tiny.path), "-q"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    try:
        proc.stdin.write(SENTENCES[0] + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().endswith("\n")
        proc.stdout.close()  # the reader leaves: the next translation meets a closed pipe
        proc.stdin.write("".join(line + "\n" for line in SENTENCES))
        proc.stdin.close()
        assert proc.wait(120) == 0
        err = proc.stderr.read().splitlines()
        assert all(line.startswith("warning: ") for line in err), err  # no traceback
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def test_with_the_input_s_line_count_known_progress_counts_lines_of_it(tiny, tmp_path):
    """`translate < file`: the bar's total is the file's lines, not what was read so far, which
    read "2,000/2,000 eta 0:00:00" at the end of every chunk."""
    long_line = " ".join(SENTENCES * 2)
    lines = [*SENTENCES[:5], "", long_line, *SENTENCES[5:]]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines), encoding="utf-8")  # the last line without its newline
    with open(path, encoding="utf-8") as handle:
        assert lines_left(handle) == len(lines)
        handle.buffer.raw.seek(len(lines[0]) + 1)  # the count starts where reading would
        assert lines_left(handle) == len(lines) - 1
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as piped:
        assert lines_left(piped) is None  # a pipe's end is unknown
    os.close(write_fd)
    seen = progress_reports(tiny, [lines[:5], lines[5:7], lines[7:]], lines_expected=len(lines))
    done = [d for d, _ in seen]
    assert {t for _, t in seen} == {len(lines)} and done == sorted(done)
    assert seen[-1] == (len(lines), len(lines))


def test_a_warnings_advice_is_given_once_a_run_not_once_a_chunk(tiny, capsys):
    """Each 2,000-line chunk warns about its own lines; the advice after them (how to avoid
    <unk>) came again with every chunk of a long stream."""
    chunks = [["A dog 🦄 runs."], ["A cat 🦄 sleeps."], ["A man 🦄 sings."]]
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, tiny.cfg.decode, iter(chunks), io.StringIO()
    )
    err = capsys.readouterr().err
    assert "line 2" in err and "line 3" in err  # each chunk's lines are still named
    said = [line for line in err.splitlines() if "source piece" in line]
    assert len(said) == 3 and said[0].endswith(BYTE_FALLBACK)
    assert all(line.endswith("(see above)") for line in said[1:])


def test_with_prefix_each_line_is_split_at_its_first_tab(tiny):
    """SOURCE<TAB>PREFIX: the translation starts with PREFIX; a line without a TAB is translated
    as it would be without --prefix; an empty source still gives an empty line."""
    lines = [f"{SENTENCES[0]}\tEin Hund\tund", SENTENCES[1], "\tEin", f"{SENTENCES[2]}\t"]
    out = io.StringIO()
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, tiny.cfg.decode, iter([lines]), out, prefix=True
    )
    got = out.getvalue().split("\n")
    assert len(got) == 5 and got[-1] == ""
    plain = translate.translate_lines(
        tiny.model, tiny.tokenizer, [SENTENCES[1], SENTENCES[2]], tiny.cfg.decode, warn=None
    )
    assert got[0].startswith("Ein Hund und")  # a TAB in the prefix is a space, as in a source
    assert got[1] == plain[0][0][0] and got[3] == plain[1][0][0] and got[2] == ""


def test_with_constraints_each_tab_starts_a_phrase(tiny):
    """SOURCE<TAB>PHRASE<TAB>PHRASE: the translation holds each PHRASE; a line without a TAB is
    translated as it would be without --constraints; an empty source gives an empty line."""
    lines = [f"{SENTENCES[0]}\tHund\tspielen", SENTENCES[1], "\tEin", f"{SENTENCES[2]}\t"]
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=4)
    out = io.StringIO()
    stream.translate_chunks(
        tiny.model, tiny.tokenizer, decode, iter([lines]), out, constraints=True
    )
    got = out.getvalue().split("\n")
    assert len(got) == 5 and got[-1] == ""
    plain = translate.translate_lines(
        tiny.model, tiny.tokenizer, [SENTENCES[1], SENTENCES[2]], decode, warn=None
    )
    assert "Hund" in got[0] and "spielen" in got[0]
    assert got[1] == plain[0][0][0] and got[3] == plain[1][0][0] and got[2] == ""
