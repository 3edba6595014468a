"""Experiment (docs/experiments.md, item 41): rerank a left-to-right model's n-best with a model
trained on the same pairs with each German sentence's words in reverse order (a right-to-left
model, as Sennrich et al. 2016 rerank with one). Not part of translator: a scratch scorer kept with
its results.

    python docs/results/multi30k-en-de-r2l/rerank_r2l.py --l2r A.pt [B.pt] --r2l C.pt [D.pt] \
        --src valid.en --ref valid.de --weights 0,0.3,0.5,1

For each weight w the candidate kept maximises log p(y|x) / lp(|y|) + w * log q(rev(y)|x) / lp,
q the right-to-left model(s) read teacher-forced, each normalised by the GNMT length penalty of
its own token count (alpha from the left-to-right checkpoint, as the channel reranker does).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import sacrebleu

from translator.decode.beam import length_penalty
from translator.loading import load_models
from translator.rerank import source_log_probs
from translator.translate import translate_lines, with_overrides


def reverse_words(text: str) -> str:
    return " ".join(reversed(text.split()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--l2r", nargs="+", required=True)
    parser.add_argument("--r2l", nargs="+", required=True)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--ref", type=Path, required=True)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--weights", default="0,0.2,0.3,0.5,0.7,1.0")
    parser.add_argument("--out", type=Path, help="hypotheses of each weight: OUT.w<weight>")
    args = parser.parse_args()

    sources = args.src.read_text(encoding="utf-8").splitlines()
    refs = args.ref.read_text(encoding="utf-8").splitlines()
    model, cfg, tokenizer = load_models([Path(p) for p in args.l2r])
    decode = with_overrides(cfg.decode, beam_size=args.candidates)
    nbests = translate_lines(model, tokenizer, sources, decode, nbest=args.candidates)

    r2l, _, r2l_tokenizer = load_models([Path(p) for p in args.r2l])
    pairs = [(i, text) for i, nbest in enumerate(nbests) for text, _ in nbest]
    reversed_texts = [reverse_words(text) for _, text in pairs]
    # log q(rev(y) | x): the R2L model reads the source and scores the reversed candidate
    scores = source_log_probs(r2l, r2l_tokenizer, reversed_texts, [sources[i] for i, _ in pairs])
    lengths = [len(ids) + 1 for ids in r2l_tokenizer.target_sp.encode(reversed_texts)]
    alpha = cfg.decode.length_penalty
    r2l_norm = iter(s / length_penalty(n, alpha) for s, n in zip(scores, lengths))
    per_line = [[next(r2l_norm) for _ in nbest] for nbest in nbests]

    for w in (float(x) for x in args.weights.split(",")):
        kept = [
            max(zip(nbest, r2l_scores), key=lambda c: c[0][1] + w * c[1])[0][0] if nbest else ""
            for nbest, r2l_scores in zip(nbests, per_line)
        ]
        bleu = sacrebleu.corpus_bleu(kept, [refs])
        lc = sacrebleu.corpus_bleu(kept, [refs], lowercase=True)
        chrf = sacrebleu.corpus_chrf(kept, [refs])
        ratio = bleu.sys_len / bleu.ref_len
        print(
            f"w {w:.2f}: BLEU {bleu.score:.2f} (lc-tok {lc.score:.2f}) chrF {chrf.score:.2f} "
            f"length ratio {ratio:.3f}",
            flush=True,
        )
        if args.out:
            Path(f"{args.out}.w{w:g}").write_text("\n".join(kept) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
