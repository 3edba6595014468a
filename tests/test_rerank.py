"""Noisy-channel reranking: the channel's scores against a token-by-token cached reference, the
combination rule on hand-made numbers, and its place in translate_lines, eval and translate."""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import SENTENCES
from translator import checkpoint, loading, rerank, translate
from translator.data.batching import pad, padding_mask
from translator.data.tokenizer import BOS_ID, EOS_ID
from translator.errors import TranslatorError
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer

TRANSLATIONS = ["Ein Mann spielt Gitarre.", "Zwei Hunde.", "", "Leute gehen die Straße entlang."]


@pytest.fixture(scope="module")
def reverse(tiny, tmp_path_factory):
    """Two random models of the tiny config's reverse direction (de->en), the first saved."""
    cfg = copy.deepcopy(tiny.cfg)
    cfg.data.src_lang, cfg.data.tgt_lang = tiny.cfg.data.tgt_lang, tiny.cfg.data.src_lang
    models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        models.append(Transformer(cfg.model).eval())
    path = tmp_path_factory.mktemp("reverse") / "reverse.pt"
    checkpoint.save(path, models[0], cfg, tiny.tokenizer)
    return SimpleNamespace(models=models, cfg=cfg, path=path)


@torch.inference_mode()
def token_log_probs(model, tokenizer, source: str, translation: str) -> list[float]:
    """log p(source token | translation, earlier source tokens), one token at a time through the
    KV cache: another code path than the teacher-forced batches of source_log_probs."""
    src = pad([tokenizer.encode([translation])[0]], suffix=[EOS_ID])  # (1, S)
    src_mask = padding_mask(src)
    target = tokenizer.target_sp.encode([source])[0] + [EOS_ID]
    memory = model.encode(src, src_mask)
    cache = model.new_cache(1, len(target), torch.float32, torch.device("cpu"))
    previous, out = BOS_ID, []
    for token in target:
        logits = model.decode(torch.tensor([[previous]]), memory, src_mask, cache)  # (1, 1, V)
        cache.advance(1)
        out.append(torch.log_softmax(logits[0, -1].double(), -1)[token].item())
        previous = token
    return out


def test_channel_scores_are_sums_of_the_cached_token_by_token_log_probs(tiny, reverse):
    model = reverse.models[0]
    sources = SENTENCES[:4]
    # 60 tokens a batch: several batches, each padded to its longest pair
    scores = rerank.source_log_probs(model, tiny.tokenizer, sources, TRANSLATIONS, 60)
    expected = [
        sum(token_log_probs(model, tiny.tokenizer, s, t)) for s, t in zip(sources, TRANSLATIONS)
    ]
    torch.testing.assert_close(scores, expected, atol=1e-3, rtol=1e-4)
    assert len(set(round(s, 3) for s in scores)) == len(scores)  # a mix-up of rows would show


def test_an_ensemble_channel_scores_each_token_by_its_members_mean_probability(tiny, reverse):
    ensemble = Ensemble(reverse.models)
    sources = SENTENCES[:4]
    scores = rerank.source_log_probs(ensemble, tiny.tokenizer, sources, TRANSLATIONS)
    expected = []
    for source, translation in zip(sources, TRANSLATIONS):
        a, b = (token_log_probs(m, tiny.tokenizer, source, translation) for m in reverse.models)
        expected.append(sum(math.log((math.exp(x) + math.exp(y)) / 2) for x, y in zip(a, b)))
    torch.testing.assert_close(scores, expected, atol=1e-3, rtol=1e-4)


class _Lengths:
    """A stand-in tokenizer whose target side gives each source a fixed number of tokens (and its
    source side one token a word)."""

    def __init__(self, lengths: dict[str, int]) -> None:
        self.target_sp = SimpleNamespace(encode=lambda texts: [[7] * lengths[t] for t in texts])

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [[7] * len(t.split()) for t in texts]


MODEL = SimpleNamespace(cfg=SimpleNamespace(max_positions=64))


def test_the_combined_score_adds_the_weighted_length_normalised_channel_score(monkeypatch):
    channel_scores = {"a b": -8.0, "a b c d": -2.0, "only": -50.0}
    calls = []

    def toy(model, tokenizer, sources, translations, batch_tokens):
        calls.append(list(translations))
        return [channel_scores[t] for t in translations]

    monkeypatch.setattr(rerank, "source_log_probs", toy)
    nbests = [[("a b", -1.0), ("a b c d", -1.2)], [("only", -0.5)], [("", 0.0)]]
    # |x| = 4 tokens + EOS = 5: lp = ((5 + 5) / 6) ** 1.0 = 10 / 6
    tokenizer = _Lengths({"x y z w": 4, "one": 1, "": 0})
    sources = ["x y z w", "one", ""]
    plain = rerank.Channel(MODEL, tokenizer, 0.0, 1.0, 8).rerank(sources, nbests)
    assert plain == [[("a b", -1.0), ("a b c d", -1.2)], [("only", -0.5)], [("", 0.0)]]
    weighed = rerank.Channel(MODEL, tokenizer, 0.1, 1.0, 8).rerank(sources, nbests)
    # a b: -1.0 + 0.1 * -8 * 6/10 = -1.48; a b c d: -1.2 + 0.1 * -2 * 6/10 = -1.32
    assert [text for text, _ in weighed[0]] == ["a b c d", "a b"]
    torch.testing.assert_close([s for _, s in weighed[0]], [-1.32, -1.48])
    # a line with one candidate (empty, over-long) is kept as it is, and not scored
    assert weighed[1:] == nbests[1:]
    assert all("only" not in c and "" not in c for c in calls)


def test_a_line_longer_than_the_channels_positions_keeps_the_direct_order(tiny, reverse):
    short = copy.deepcopy(reverse.cfg.model)
    short.max_positions = 8  # reads and scores at most 7 tokens
    torch.manual_seed(1)
    channel = rerank.Channel(Transformer(short).eval(), tiny.tokenizer, 1000.0, 1.0, 4)
    long_source = SENTENCES[2]  # 16 words
    nbests = [[("Ein Mädchen.", -1.0), ("Zwei Hunde.", -2.0)]]
    assert channel.rerank([long_source], nbests) == nbests
    # the same candidates for a short source are rescored
    rescored = channel.rerank(["A girl."], nbests)[0]
    assert {t for t, _ in rescored} == {"Ein Mädchen.", "Zwei Hunde."}
    assert all(score < -10 for _, score in rescored)  # weight 1000 x a log-probability


def test_translate_lines_reranks_the_channels_n_best_and_shows_the_nbest_asked(tiny, reverse):
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=2, length_penalty=1.0)
    lines = SENTENCES[:5]
    candidates = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, nbest=6)

    def channel(weight):
        return rerank.Channel(reverse.models[0], tiny.tokenizer, weight, 1.0, 6)

    # weight 0: the search's own n-best order, at the channel's width (6, not the beam's 2)
    same = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, nbest=6, channel=channel(0.0)
    )
    assert [[t for t, _ in c] for c in same] == [[t for t, _ in c] for c in candidates]
    # a large weight: the candidate the channel reads the source back from best
    one = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, channel=channel(1000.0)
    )
    assert all(len(c) == 1 for c in one)
    for line, found, nbest in zip(lines, one, candidates):
        texts = [t for t, _ in nbest]
        if len(texts) == 1:  # a line split to fit the model: one joined candidate, not reranked
            assert found[0][0] == texts[0]
            continue
        read_back = rerank.source_log_probs(
            reverse.models[0], tiny.tokenizer, [line] * len(texts), texts
        )
        assert found[0][0] == texts[max(range(len(texts)), key=read_back.__getitem__)]
    assert any(o[0][0] != c[0][0] for o, c in zip(one, candidates))  # the weight changed some


def test_a_reranked_n_best_keeps_each_lines_prefix(tiny, reverse):
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=2, length_penalty=1.0)
    channel = rerank.Channel(reverse.models[0], tiny.tokenizer, 1000.0, 1.0, 6)
    prefixes = ["Ein Hund", "", "Zwei"]
    found = translate.translate_lines(
        tiny.model, tiny.tokenizer, SENTENCES[:3], decode, 3, channel=channel, prefixes=prefixes
    )
    for hyps, prefix in zip(found, prefixes):
        assert hyps and all(text.startswith(prefix) for text, _ in hyps)


def test_alignments_and_a_channel_are_refused_together(tiny, reverse):
    channel = rerank.Channel(reverse.models[0], tiny.tokenizer, 0.3, 1.0, 4)
    with pytest.raises(TranslatorError, match="reranked"):
        translate.translate_lines(
            tiny.model,
            tiny.tokenizer,
            ["A dog."],
            tiny.cfg.decode,
            alignment_layer=0,
            channel=channel,
        )


def test_a_channel_of_the_same_direction_is_refused_in_one_line(tiny):
    with pytest.raises(TranslatorError, match="reverse direction") as err:
        loading.load_channel(tiny.path, tiny.cfg.data, tiny.cfg.decode, "cpu", "fp32")
    assert "\n" not in str(err.value)


def test_models_of_two_directions_are_not_one_ensemble_nor_one_channel(tiny, reverse):
    """The tiny model and its reverse share one joint vocabulary: only the languages differ."""
    with pytest.raises(TranslatorError, match="translates de->en") as err:
        loading.load_models([tiny.path, reverse.path], "cpu", "fp32")
    assert err.value.where == str(reverse.path) and "one direction" in err.value.fix
    with pytest.raises(TranslatorError, match="translates en->de") as err:
        loading.load_channel(
            [reverse.path, tiny.path], tiny.cfg.data, tiny.cfg.decode, "cpu", "fp32"
        )
    assert err.value.where == str(tiny.path)


def test_eval_and_translate_take_a_channel(tiny, reverse, tmp_path):
    from typer.testing import CliRunner

    from translator import cli

    src, ref = tmp_path / "s.en", tmp_path / "r.de"
    src.write_text("".join(s + "\n" for s in SENTENCES))
    ref.write_text("".join(s + "\n" for s in SENTENCES))
    hyp = tmp_path / "h.de"
    args = ["--channel", str(reverse.path), "--channel-weight", "0.5", "--channel-candidates", "3"]
    runner = CliRunner()
    result = runner.invoke(
        cli.app,
        ["eval", str(tiny.path), "--src", str(src), "--ref", str(ref), "-o", str(hyp), "-q", *args]
        + ["--beam", "1"],
    )
    assert result.exit_code == 0, result.output
    assert "BLEU" in result.output and len(hyp.read_text().splitlines()) == len(SENTENCES)
    # the search's beam is the channel's candidates, wider than --beam
    assert "decoded: beam 3, " in result.output and "3-best reranked" in result.output
    result = runner.invoke(
        cli.app, ["translate", str(tiny.path), "-q", *args], input="A dog.\n\nTwo men.\n"
    )
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 3
    wrong = subprocess.run(
        [
            sys.executable,
            "-m",
            "translator",
            "translate",
            str(tiny.path),
            "--channel",
            str(tiny.path),
        ],
        input="A dog.\n",
        capture_output=True,
        text=True,
    )
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr.startswith("error: ") and "reverse direction" in wrong.stderr
    assert len(wrong.stderr.splitlines()) == 1
