"""BLEU and chrF: sacreBLEU's scores, the tokenizer a target language needs, the warnings when it
does not fit (translator/bleu.py)."""

import pytest
import sacrebleu

from translator import bleu
from translator.errors import TranslatorError

REFS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."]


def test_perfect_hypotheses_score_100():
    scores = bleu.score(REFS, REFS)
    assert scores.bleu == pytest.approx(100.0) and scores.chrf == pytest.approx(100.0)
    assert "nrefs:1" in scores.bleu_signature and "case:mixed" in scores.bleu_signature
    assert scores.lc_tok_bleu is None and len(scores.lines()) == 2


def test_lowercased_tokenized_bleu_is_separate_and_labelled():
    hyps = [r.lower().replace(".", " .") for r in REFS]
    scores = bleu.score(hyps, REFS, lc_tok=True)
    assert scores.lc_tok_bleu == pytest.approx(100.0) and scores.bleu < 60.0
    assert "case:lc" in scores.lc_tok_signature and "tok:13a" in scores.lc_tok_signature
    line = scores.lines()[2]
    assert line.startswith("lowercased tokenized BLEU = 100.00") and "not comparable" in line


# The example: one sentence, one word apart. 13a sees one token per sentence and scores 0.
ZH_HYP, ZH_REF = "我喜欢吃苹果。", "我喜欢吃香蕉。"


@pytest.mark.parametrize("lang", ["zh", "zh-CN", "ZH_Hans", "zho"])
def test_chinese_targets_are_scored_with_the_chinese_tokenizer(lang):
    scores = bleu.score([ZH_HYP], [ZH_REF], tgt_lang=lang)
    assert scores.bleu == pytest.approx(43.47, abs=0.01) and "tok:zh" in scores.bleu_signature
    assert bleu.score([ZH_HYP], [ZH_REF]).bleu == 0.0  # no language: 13a, as before
    # chrF is language-free
    assert scores.chrf == pytest.approx(bleu.score([ZH_HYP], [ZH_REF]).chrf)


@pytest.mark.parametrize("lang", ["cn", "zh_cn"])
def test_country_codes_used_as_language_suffixes_pick_the_languages_tokenizer(lang):
    scores = bleu.score([ZH_HYP], [ZH_REF], tgt_lang=lang)
    assert "tok:zh" in scores.bleu_signature
    assert bleu.unspaced_warning([ZH_REF], lang) == ""


@pytest.mark.parametrize("lang", ["ch", "chinese", "yy"])
def test_references_in_chinese_scored_with_13a_are_warned_about(lang):
    assert "13a tokenizer" in bleu.unspaced_warning([ZH_REF, "我喜欢 Python。"], lang)
    assert bleu.unspaced_warning(["Ein Mann fährt Fahrrad.", ZH_REF], lang) == ""
    assert "tok:13a" in bleu.score([ZH_HYP], [ZH_REF], tgt_lang=lang).bleu_signature


@pytest.mark.parametrize(
    "lang, tokenizer, hyp, ref",
    [
        ("ja", "ja-mecab", "私はリンゴを食べるのが好きです。", "私はバナナを食べるのが好きです。"),
        ("ko", "ko-mecab", "나는 사과를 먹는 것을 좋아한다.", "나는 바나나를 먹는 것을 좋아한다."),
    ],
)
def test_japanese_and_korean_targets_use_sacrebleus_mecab_tokenizers(lang, tokenizer, hyp, ref):
    """Needs the [cjk] extra (sacrebleu[ja,ko]), which the dev install includes."""
    scores = bleu.score([hyp], [ref], tgt_lang=lang)
    # the tokenizer named outright
    direct = sacrebleu.BLEU(tokenize=tokenizer).corpus_score([hyp], [[ref]])
    assert (
        scores.bleu == pytest.approx(direct.score) and f"tok:{tokenizer}" in scores.bleu_signature
    )
    # whitespace tokens would match fewer n-grams
    assert scores.bleu > bleu.score([hyp], [ref]).bleu


def test_hypothesis_count_must_match():
    with pytest.raises(TranslatorError, match="2 hypotheses for 3 references"):
        bleu.score(REFS[:2], REFS)
    with pytest.raises(TranslatorError, match="1 hypothesis for 3 references"):
        bleu.score(REFS[:1], REFS)


def test_an_empty_corpus_is_refused_in_words():
    with pytest.raises(TranslatorError, match="no sentences to score"):
        bleu.score([], [])


def test_scores_take_hypotheses_first_and_references_second():
    """BLEU's brevity penalty and chrF's recall weighting are asymmetric: swapped arguments would
    show."""
    short, full = ["Ein Mann ."], ["Ein Mann fährt mit dem Fahrrad die Straße entlang ."]
    assert bleu.score(short, full).bleu < bleu.score(full, short).bleu
    assert bleu.score(short, full).chrf < bleu.score(full, short).chrf


# Thai: no spaces between words, and no language code that sacreBLEU maps to a tokenizer
TH_REFS = ["ผู้ชายคนหนึ่งกำลังเล่นกีตาร์อยู่บนเวที", "สุนัขสองตัววิ่งเล่นอยู่บนชายหาด"]
TH_HYPS = ["ผู้ชายคนหนึ่งกำลังเล่นกีตาร์บนเวที", "สุนัขสองตัววิ่งอยู่บนชายหาด"]


def test_a_thai_target_is_warned_about_and_char_tokenization_can_be_chosen():
    """13a sees each Thai line as one word (BLEU 0 for near-misses); the warning names the fix
    and --tokenize char scores characters, as sacrebleu -tok char does."""
    assert "--tokenize char" in bleu.unspaced_warning(TH_REFS, "th")
    assert bleu.score(TH_HYPS, TH_REFS, tgt_lang="th").bleu == 0.0
    chosen = bleu.score(TH_HYPS, TH_REFS, tgt_lang="th", tokenize="char")
    expected = sacrebleu.BLEU(tokenize="char").corpus_score(TH_HYPS, [TH_REFS])
    assert chosen.bleu == pytest.approx(expected.score) and chosen.bleu > 50
    assert "tok:char" in chosen.bleu_signature
    assert bleu.unspaced_warning(TH_REFS, "th", tokenize="char") == ""  # chosen: no warning
    # half Thai, half the names of products: still warned about
    mixed = [f"{line} iPhone 15 Pro Max, Galaxy S24 Ultra, Pixel 9" for line in TH_REFS]
    assert "--tokenize char" in bleu.unspaced_warning(mixed, "th")
    assert bleu.unspaced_warning(["A dog runs on the beach."], "th") == ""  # not Thai text
    with pytest.raises(TranslatorError, match="unknown BLEU tokenizer 'flores200'"):
        bleu.score(TH_HYPS, TH_REFS, tokenize="flores200")  # downloads a model: not offered


@pytest.mark.parametrize(
    "references",
    [
        ["\U00020000\U00020001\U00020002\U00020003"],  # CJK Extension B ideographs
        ["\uff71\uff72\uff73\uff74\uff75"],  # half-width katakana
        ["\u3053\u3093\u306b\u3061\u306f\u3002"],  # hiragana and the ideographic full stop
    ],
)
def test_every_chinese_or_japanese_script_range_is_told_as_such(references):
    """One table of scripts for joining pieces, terms and BLEU (translator/scripts.py): the
    characters outside the main ideograph blocks are told too."""
    assert bleu.unspaced_script(references) == "cjk"
    assert "--tokenize zh" in bleu.unspaced_warning(references, "xx")
