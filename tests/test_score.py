"""`translator score`: forced-decoding scores against independent references (a token-by-token
cached decode, the beam search's own scores, the training loss), and the command's input checks."""

from __future__ import annotations

import math
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import SENTENCES
from translator import score
from translator.data.batching import make_batch
from translator.data.tokenizer import BOS_ID, EOS_ID
from translator.decode.beam import beam_search, length_penalty
from translator.decode.forced import target_log_probs
from translator.errors import TranslatorError
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer
from translator.train.loss import token_loss

TARGETS = ["Ein Mann spielt Gitarre.", "Zwei Hunde.", "", "Leute gehen die Straße entlang.", "Ja"]


@torch.inference_mode()
def cached_log_prob(model, src: list[int], tgt: list[int]) -> float:
    """log p(tgt + EOS | src) one token at a time through the KV cache, in float64 sums."""
    src_t = torch.tensor([src + [EOS_ID]])
    src_mask = (src_t != 0)[:, None, None, :]
    memory = model.encode(src_t, src_mask)
    cache = model.new_cache(1, len(tgt) + 1, torch.float32, torch.device("cpu"))
    previous, total = BOS_ID, 0.0
    for token in tgt + [EOS_ID]:
        logits = model.decode(torch.tensor([[previous]]), memory, src_mask, cache)  # (1, 1, V)
        cache.advance(1)
        total += torch.log_softmax(logits[0, -1].double(), -1)[token].item()
        previous = token
    return total


def test_scores_are_the_cached_token_by_token_sums_in_input_order(tiny):
    sources = SENTENCES[:5]
    src = tiny.tokenizer.encode(sources)
    tgt = tiny.tokenizer.target_sp.encode(TARGETS)
    # 50 tokens a batch: several batches of mixed lengths, each padded to its longest pair
    scores = target_log_probs(tiny.model, src, tgt, batch_tokens=50)
    expected = [cached_log_prob(tiny.model, s, t) for s, t in zip(src, tgt)]
    torch.testing.assert_close(scores, expected, atol=1e-4, rtol=1e-5)
    assert len({round(s, 3) for s in scores}) == len(scores)  # a mix-up of rows would show


def test_scoring_the_beams_own_hypotheses_gives_their_scores(tiny):
    """The search's scores come from cached incremental steps; scoring its output teacher-forced
    and dividing by the same length penalty must give them back."""
    src = tiny.tokenizer.encode(SENTENCES[:4])
    batch = make_batch(src, [[] for _ in src])
    alpha = 0.8
    found = beam_search(
        tiny.model,
        batch.src,
        batch.src_mask,
        beam_size=3,
        alpha=alpha,
        max_len_a=0.0,
        max_len_b=12,
        nbest=3,
    )
    pairs = [(s, h) for s, hyps in zip(src, found) for h in hyps]
    sums = target_log_probs(tiny.model, [s for s, _ in pairs], [h.tokens for _, h in pairs])
    for (_, h), total in zip(pairs, sums):
        assert total / length_penalty(len(h.tokens) + 1, alpha) == pytest.approx(h.score, abs=1e-4)


def test_the_summary_cross_entropy_is_the_training_losss_nll(tiny):
    """Per-token NLL over a set of pairs, through the training loss on full logits."""
    pairs = score.score_lines(tiny.model, tiny.tokenizer, SENTENCES[:5], TARGETS, warn=None)
    batch = make_batch(
        tiny.tokenizer.encode(SENTENCES[:5]), tiny.tokenizer.target_sp.encode(TARGETS)
    )
    with torch.inference_mode():
        logits = tiny.model(batch.src, batch.tgt_in, batch.src_mask)
        _, nll = token_loss(logits, batch.tgt_out, 0.0)
    assert sum(p.tokens for p in pairs) == batch.n_tgt_tokens
    assert -sum(p.log_prob for p in pairs) == pytest.approx(nll.item(), rel=1e-5)


def test_an_ensemble_scores_each_token_by_its_members_mean_probability(tiny):
    torch.manual_seed(5)
    other = Transformer(tiny.cfg.model).eval()
    src = tiny.tokenizer.encode(SENTENCES[:3])
    tgt = tiny.tokenizer.target_sp.encode(TARGETS[:3])
    scores = target_log_probs(Ensemble([tiny.model, other]), src, tgt)
    for s, t, total in zip(src, tgt, scores):
        per_model = []
        for model in (tiny.model, other):
            with torch.inference_mode():
                b = make_batch([s], [t])
                log_p = torch.log_softmax(model(b.src, b.tgt_in, b.src_mask)[0].double(), -1)
                per_model.append(log_p.gather(1, b.tgt_out[0][:, None]).squeeze(1))
        mean = torch.logaddexp(*per_model) - math.log(2)
        assert total == pytest.approx(mean.sum().item(), abs=1e-4)


def test_a_pair_too_long_for_the_positions_is_nan_with_a_warning_and_the_rest_unchanged(tiny):
    long = " ".join(["A man rides a bike."] * 20)  # far over the tiny model's 40 positions
    sources, targets = [SENTENCES[0], long, SENTENCES[1]], [TARGETS[0], TARGETS[1], long]
    warned = []
    pairs = score.score_lines(tiny.model, tiny.tokenizer, sources, targets, warn=warned.append)
    alone = score.score_lines(tiny.model, tiny.tokenizer, [SENTENCES[0]], [TARGETS[0]], warn=None)
    assert math.isnan(pairs[1].log_prob) and math.isnan(pairs[2].log_prob)
    assert pairs[0].log_prob == pytest.approx(alone[0].log_prob, abs=1e-5)
    assert len(warned) == 1 and "lines 2, 3:" in warned[0] and "not scored" in warned[0]


def test_normalised_values():
    pair = score.PairScore(-12.0, 4)
    assert pair.value() == -12.0
    assert pair.value(per_token=True) == -3.0
    assert pair.value(alpha=1.0) == pytest.approx(-12.0 / ((5 + 4) / 6))


def test_score_lines_refuses_strings_and_unequal_lists(tiny):
    with pytest.raises(TypeError):
        score.score_lines(tiny.model, tiny.tokenizer, "A dog.", "Ein Hund.")
    with pytest.raises(TranslatorError, match="1 source but 0 targets"):
        score.score_lines(tiny.model, tiny.tokenizer, ["A dog."], [])


def _score(tiny, *args, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "translator", "score", str(tiny.path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_reads_files_or_tsv_and_prints_one_score_a_pair(tiny, tmp_path):
    src, tgt = tmp_path / "s.en", tmp_path / "t.de"
    src.write_text("\n".join(SENTENCES[:5]) + "\n")
    tgt.write_text("\n".join(TARGETS) + "\n")
    files = _score(tiny, "--src", str(src), "--tgt", str(tgt))
    assert files.returncode == 0, files.stderr
    values = [float(v) for v in files.stdout.splitlines()]
    # the reference: token by token through the cache, lengths from SentencePiece itself
    src_ids = tiny.tokenizer.encode(SENTENCES[:5])
    tgt_ids = tiny.tokenizer.target_sp.encode(TARGETS)
    sums = [cached_log_prob(tiny.model, s, t) for s, t in zip(src_ids, tgt_ids)]
    lengths = [len(t) + 1 for t in tgt_ids]
    assert values == pytest.approx(sums, abs=1e-3)
    tsv = "".join(f"{s}\t{t}\n" for s, t in zip(SENTENCES[:5], TARGETS))
    piped = _score(tiny, "--per-token", "-q", stdin=tsv)
    assert piped.returncode == 0 and piped.stderr == ""
    per_token = [float(v) for v in piped.stdout.splitlines()]
    assert per_token == pytest.approx([v / n for v, n in zip(sums, lengths)], abs=1e-3)
    penalised = _score(tiny, "--length-penalty", "1", "-q", stdin=tsv)
    gnmt = [v / ((5 + n) / 6) for v, n in zip(sums, lengths)]
    assert [float(v) for v in penalised.stdout.splitlines()] == pytest.approx(gnmt, abs=1e-3)
    # a negative alpha, which translate takes (favouring short outputs), rescores as it printed
    favoured = _score(tiny, "--length-penalty", "-0.5", "-q", stdin=tsv)
    short = [v / ((5 + n) / 6) ** -0.5 for v, n in zip(sums, lengths)]
    assert [float(v) for v in favoured.stdout.splitlines()] == pytest.approx(short, abs=1e-3)
    # the summary: perplexity of all target tokens
    ppl = math.exp(-sum(sums) / sum(lengths))
    assert f"{sum(lengths)} target tokens" in files.stderr
    assert f"perplexity {ppl:.2f}" in files.stderr
    # a pair too long for the positions: nan in its place, the others as they were
    long = " ".join(["A man rides a bike."] * 20)
    with_long = _score(tiny, "-q", stdin=f"{long}\tEin Mann.\n" + tsv)
    assert with_long.stdout.splitlines()[0] == "nan"
    assert [float(v) for v in with_long.stdout.splitlines()[1:]] == pytest.approx(sums, abs=1e-3)


@pytest.mark.parametrize(
    "args, stdin, message",
    [
        (["--src", "{src}"], "", "--src and --tgt go together"),
        (["--per-token", "--length-penalty", "1"], "a\tb\n", "both normalise"),
        ([], "A dog.\tEin Hund.\nA cat.\n", "stdin line 2: no TAB"),
        (["--src", "{src}", "--tgt", "{short}"], "", "has 2 lines but"),
    ],
)
def test_bad_input_is_one_line_error(tiny, tmp_path, args, stdin, message):
    (tmp_path / "s").write_text("A dog.\nA cat.\n")
    (tmp_path / "short").write_text("Ein Hund.\n")
    args = [a.format(src=tmp_path / "s", short=tmp_path / "short") for a in args]
    result = _score(tiny, "-q", *args, stdin=stdin)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    if "line 2" not in message:
        assert result.stdout == ""


def test_stdin_tsv_empty_lines_are_empty_pairs_and_a_bad_line_keeps_what_came_before(tiny):
    good = "".join(f"{s}\t{t}\n" for s, t in zip(SENTENCES[:3], TARGETS[:3]))
    result = _score(tiny, "-q", stdin=good + "\n" + "no tab here\n" + good)
    assert result.returncode == 1 and "stdin line 5: no TAB" in result.stderr
    scored = result.stdout.splitlines()
    assert len(scored) == 4  # the three pairs and the empty one before the bad line
    assert float(scored[3]) == pytest.approx(cached_log_prob(tiny.model, [], []), abs=1e-3)


def test_a_line_with_more_than_one_tab_is_warned_and_not_scored_and_the_stream_goes_on(tiny):
    """A TAB inside a sentence (Multi30k's own train.de has one): `paste` gives a line that
    cannot be split, which must not end a corpus-long stream or shift the lines after it."""
    good = "".join(f"{s}\t{t}\n" for s, t in zip(SENTENCES[:3], TARGETS[:3]))
    result = _score(tiny, stdin=good + "A\tB\tC\n" + good)
    assert result.returncode == 0, result.stderr
    scored = result.stdout.splitlines()
    assert len(scored) == 7 and scored[3] == "nan" and scored[:3] == scored[4:]
    assert "stdin line 4: more than one TAB, so source and target cannot be told" in result.stderr
    assert "7 pairs (1 with more than one TAB, not scored)" in result.stderr


def test_closed_streams(tiny, tmp_path):
    src = tmp_path / "s.en"
    src.write_text("A dog.\n")
    files = ["--src", str(src), "--tgt", str(src)]
    # stdout closed: refused before any work, one line
    result = subprocess.run(
        [sys.executable, "-m", "translator", "score", str(tiny.path), *files],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert result.returncode == 1 and result.stderr.startswith("error: ")
    assert "stdout is closed" in result.stderr and "Traceback" not in result.stderr
    # files need no stdin, also where a progress bar is due (stderr a terminal)
    terminal, side = pty.openpty()
    result = subprocess.run(
        [sys.executable, "-m", "translator", "score", str(tiny.path), *files],
        stdout=subprocess.PIPE,
        stderr=side,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(0),
    )
    os.close(side)
    shown = os.read(terminal, 1 << 16).decode(errors="replace")
    os.close(terminal)
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, shown
    assert "Traceback" not in shown


@pytest.mark.skipif(not Path("/dev/fd").exists(), reason="needs /dev/fd for pipes as paths")
def test_a_pipe_can_be_the_source_file(tiny, tmp_path):
    """`--src <(head test.en)`: a pipe, not a regular file, read like one."""
    read, write = os.pipe()
    os.write(write, b"A dog.\n")
    os.close(write)
    tgt = tmp_path / "t.de"
    tgt.write_text("Ein Hund.\n")
    result = subprocess.run(
        [sys.executable, "-m", "translator", "score", str(tiny.path), "-q"]
        + ["--src", f"/dev/fd/{read}", "--tgt", str(tgt)],
        capture_output=True,
        text=True,
        timeout=120,
        pass_fds=(read,),
    )
    os.close(read)
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, result.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_scores_match_the_cpus_and_repeat_exactly(tiny):
    import copy

    src = tiny.tokenizer.encode(SENTENCES[:5])
    tgt = tiny.tokenizer.target_sp.encode(TARGETS)
    cpu = target_log_probs(tiny.model, src, tgt, batch_tokens=50)
    model = copy.deepcopy(tiny.model).cuda()
    first = target_log_probs(model, src, tgt, batch_tokens=50)
    assert first == target_log_probs(model, src, tgt, batch_tokens=50)  # no atomics in the sums
    torch.testing.assert_close(first, cpu, atol=1e-3, rtol=1e-4)


def test_an_overflowing_model_s_scores_are_warned_and_counted_apart_from_too_long(tiny):
    from tests.test_translate import overflowing
    from translator.line_warnings import NOT_FINITE

    said: list[str] = []
    pairs = score.score_lines(
        overflowing(tiny.model), tiny.tokenizer, SENTENCES[:2], SENTENCES[:2], warn=said.append
    )
    assert all(p.fits and math.isnan(p.log_prob) for p in pairs)
    assert said == [f"lines 1, 2: {NOT_FINITE}"]
    line = score.summary(2, 0, 0.0, 0, overflowed=2)
    assert line == "score: 2 pairs (2 not finite, not scored)"
    assert score.summary(3, 1, 0.0, 0, overflowed=2).startswith("score: 3 pairs (1 too long, 2 not")


def test_a_perplexity_past_floats_is_inf_not_an_overflow_error():
    assert score.summary(1, 0, -5000.0, 4).endswith("1250.0000 nats a token, perplexity inf")
    assert score.summary(1, 0, -4.0, 4).endswith("perplexity 2.72")


def test_perplexity_is_not_capped_below_what_a_float_holds():
    """Training logged exp(min(nll, 50)): every loss past 50 nats read as the same 5.18e21."""
    from translator.decode.forced import perplexity

    assert perplexity(60.0) == pytest.approx(1.142e26, rel=1e-3)
    assert perplexity(51.0) > perplexity(50.0)
    assert perplexity(709.0) == math.inf and perplexity(0.0) == 1.0
