"""sacreBLEU and chrF of detokenized text, with the BLEU tokenizer its language needs: what `eval`
and training's validation score with."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import get_args

import sacrebleu

from translator import scripts
from translator.config.train import BleuTokenizer
from translator.errors import TranslatorError, counted

# ISO 639 codes other than the two-letter ones that sacreBLEU knows for its language tokenizers,
# and country codes that corpora use as language suffixes (`train.jp`)
LANGUAGE_ALIASES = {
    **{"zho": "zh", "chi": "zh", "cmn": "zh", "jpn": "ja", "kor": "ko"},
    **{"cn": "zh", "jp": "ja", "kr": "ko"},
}
# Chinese and Japanese (written without spaces: 13a would score whole phrases as one word) and
# Korean (spaced, with particles attached): each has a tokenizer of its own
UNSPACED = re.compile(f"[{scripts.char_class(scripts.UNSPACED + scripts.HANGUL)}]")
# Thai, Lao, Burmese, Khmer: written without spaces between words, and no sacreBLEU tokenizer of
# their own that works offline (flores200's downloads a model): characters are the usual unit
NO_SPACES = re.compile(f"[{scripts.char_class(scripts.UNSPACED_WORDS)}]")
TOKENIZERS = tuple(name for name in get_args(BleuTokenizer) if name)
UNSPACED_LANGUAGES = ("zh", "ja", "ko")  # the languages sacreBLEU tokenizes by their own rules


@dataclass
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    lc_tok_bleu: float | None = None  # lowercased, 13a-tokenized BLEU (the Multi30k literature's)
    lc_tok_signature: str = ""
    decoded: str = ""  # how the hypotheses were decoded (search, precision), when eval made them
    terms: str = ""  # with a term list: how many of its targets the hypotheses hold
    test_set: str = ""  # the files eval scored: a split's name alone does not say which data

    def lines(self) -> list[str]:
        out = [
            f"BLEU = {self.bleu:.2f}  ({self.bleu_signature})",
            f"chrF = {self.chrf:.2f}  ({self.chrf_signature})",
        ]
        if self.decoded:  # beside the scores: a number without its precision does not reproduce
            out.append(f"decoded: {self.decoded}")
        if self.test_set:
            out.append(f"test set: {self.test_set}")
        if self.terms:
            out.append(f"terms: {self.terms}")
        if self.lc_tok_bleu is not None:
            out.append(
                f"lowercased tokenized BLEU = {self.lc_tok_bleu:.2f}  ({self.lc_tok_signature})  "
                "[as Multi30k papers report (multi-bleu on lowercased, tokenized text), "
                "sacreBLEU's 13a tokenizer standing in for Moses'; not comparable with "
                "sacreBLEU above]"
            )
        return out


def score(
    hypotheses: list[str],
    references: list[str],
    *,
    tgt_lang: str = "",
    lc_tok: bool = False,
    tokenize: str = "",
) -> Scores:
    """Corpus-level scores of detokenized `hypotheses` against one reference each.

    `tgt_lang` picks sacreBLEU's BLEU tokenizer as its own command line does: `zh`, `ja-mecab` or
    `ko-mecab` for Chinese, Japanese and Korean (written without spaces between words, or with
    particles attached), `13a` for the rest; `tokenize` (one of TOKENIZERS) overrides it. chrF
    needs no language: it drops whitespace and compares characters.
    """
    if len(hypotheses) != len(references):
        raise TranslatorError(
            f"{counted(len(hypotheses), 'hypothesis', 'hypotheses')} for "
            f"{counted(len(references), 'reference')}",
            "score",
            "give one hypothesis a reference, line-aligned",
        )
    if not hypotheses:  # sacreBLEU's corpus score indexes the first line
        raise TranslatorError("no sentences to score", "score", "give at least one pair")
    bleu, chrf = bleu_metric(tgt_lang, tokenize), sacrebleu.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    scores = Scores(
        bleu_score.score, chrf_score.score, str(bleu.get_signature()), str(chrf.get_signature())
    )
    if lc_tok:  # 13a tokenization of both sides stands in for Moses tokenization + multi-bleu.perl
        lc = sacrebleu.BLEU(lowercase=True, tokenize="13a")
        scores.lc_tok_bleu = lc.corpus_score(hypotheses, [references]).score
        scores.lc_tok_signature = str(lc.get_signature())
    return scores


def term_use(required: list[list[str]], hyps: list[str], refs: list[str]) -> str:
    """How many of the lines' term targets their hypotheses hold, over all and over those the
    reference holds too (the WMT 2021 terminology task's term accuracy counts those)."""
    pairs = [(t, h, r) for terms, h, r in zip(required, hyps, refs) for t in terms]
    held = sum(t in h for t, h, _ in pairs)
    in_ref = [(t, h) for t, h, r in pairs if t in r]
    held_in_ref = sum(t in h for t, h in in_ref)
    percent = 100 * held / len(pairs) if pairs else 0.0
    return (
        f"{held} of {len(pairs)} term targets in the hypotheses ({percent:.1f}%); of the "
        f"{len(in_ref)} the references hold, {held_in_ref}"
    )


def bleu_metric(tgt_lang: str, tokenize: str = "") -> sacrebleu.BLEU:
    """sacreBLEU's BLEU for a target language code (`zh`, `ja-JP`, `kor`...; region and script
    ignored), or with the tokenizer `tokenize` names when it is not empty."""
    if tokenize and tokenize not in TOKENIZERS:
        raise TranslatorError(
            f"unknown BLEU tokenizer {tokenize!r}",
            "--tokenize",
            f"use one of {', '.join(TOKENIZERS)}",
        )
    try:
        if tokenize:
            return sacrebleu.BLEU(tokenize=tokenize)
        return sacrebleu.BLEU(trg_lang=bleu_language(tgt_lang))
    except RuntimeError:  # sacreBLEU's MeCab tokenizers for ja/ko are extras, missing here
        raise TranslatorError(
            f"scoring BLEU for {tgt_lang!r} needs sacreBLEU's MeCab tokenizer, not installed",
            "data.tgt_lang",
            "pip install 'sacrebleu[ja,ko]' (or this package's [cjk] extra)",
        ) from None


def bleu_language(tgt_lang: str) -> str:
    """`zh-Hans`, `ja_JP`, `jpn`, `jp` -> `zh`, `ja`, `ja`, `ja`: the code sacreBLEU knows."""
    lang = re.split(r"[-_]", tgt_lang.strip().lower())[0]
    return LANGUAGE_ALIASES.get(lang, lang)


def unspaced_script(references: list[str]) -> str:
    """'cjk' or 'thai' (Thai, Lao, Burmese, Khmer) when most of the references' characters are of
    a script written without spaces between words; empty otherwise."""
    text = "".join(references).replace(" ", "")
    if text and len(UNSPACED.findall(text)) >= 0.3 * len(text):
        return "cjk"
    if text and len(NO_SPACES.findall(text)) >= 0.3 * len(text):
        return "thai"
    return ""


def unspaced_warning(references: list[str], tgt_lang: str, tokenize: str = "") -> str:
    """A warning when most of the references' characters are of a script written without spaces
    but BLEU would tokenize with 13a (a corpus's own suffix, `zh_cn` or `ch`; Thai, which no
    language code maps): 13a splits only at spaces and punctuation, so BLEU would count whole
    clauses as words. Empty when none is due, or when `tokenize` was chosen."""
    if tokenize or bleu_language(tgt_lang) in UNSPACED_LANGUAGES:
        return ""
    script = unspaced_script(references)
    if not script:
        return ""
    what, fix = (
        ("Chinese, Japanese or Korean characters", "zh (or ja-mecab, ko-mecab)")
        if script == "cjk"
        else ("Thai, Lao, Burmese or Khmer letters", "char")
    )
    return (
        f"the references are mostly {what}, but data.tgt_lang={tgt_lang!r} scores BLEU with "
        "sacreBLEU's 13a tokenizer, which splits at spaces: that BLEU is not comparable (chrF "
        f"is); score with --tokenize {fix} (eval; train.valid_bleu_tokenize in training)"
    )
