"""Constrained decoding on real text: reference words the plain search missed, given as constraints.

    .venv/bin/python -m bench.constraints runs/multi30k-en-de/avg.pt \
        ../shared/data/multi30k/valid.en ../shared/data/multi30k/valid.de --beam 5

The usual check of lexically constrained decoding (Post & Vilar 2018, Hu et al. 2019): each line's
constraint is a word of its reference that the plain translation lacks (the longest such word of
4 letters or more; a line whose translation has them all gets none). Both decodings run through
`translate_lines`, as `translate` and `translate --constraints` do; printed: how many lines got a
constraint, the share of those lines whose output holds it as a whole word, sacreBLEU of each
output against the references, and the seconds of each (the plain one again after the
constrained, alternating).
The constraints come from the references, so the BLEU gain is an upper bound for real terminology.
"""

from __future__ import annotations

import re
import time

import sacrebleu
import torch

from bench import parallel_text
from translator.translate import translate_lines, with_overrides


def missed_word(reference: str, output: str) -> str:
    """The longest word (4+ letters, punctuation stripped) of `reference` not in `output`'s words;
    "" when there is none."""
    said = {word.strip(".,;:!?\"'()") for word in output.split()}
    words = [word.strip(".,;:!?\"'()") for word in reference.split()]
    missed = [word for word in words if len(word) >= 4 and word.isalpha() and word not in said]
    return max(missed, key=len, default="")


def main() -> None:
    parser = parallel_text.parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    (model, cfg, tokenizer), sources, references = parallel_text.model_and_text(args)
    decode = with_overrides(cfg.decode, beam_size=args.beam)

    def run(constraints: list[list[str]] | None) -> tuple[float, list[str]]:
        began = time.perf_counter()
        found = translate_lines(
            model, tokenizer, sources, decode, warn=None, data=cfg.data, constraints=constraints
        )
        return time.perf_counter() - began, [hyps[0][0] for hyps in found]

    plain_seconds, plain = run(None)
    terms = [missed_word(r, o) for r, o in zip(references, plain)]
    constrained_seconds, constrained = run([[t] if t else [] for t in terms])
    plain_again, _ = run(None)
    asked = [(t, p, c) for t, p, c in zip(terms, plain, constrained) if t]
    held = sum(bool(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", c)) for t, _, c in asked)
    print(
        f"{len(sources)} lines, beam {args.beam}, {torch.get_num_threads()} threads, fp32; "
        f"{len(asked)} lines got a constraint; their outputs hold it: plain 0 (by choice), "
        f"constrained {held} ({100 * held / max(len(asked), 1):.1f}%)"
    )
    for name, out in (("plain", plain), ("constrained", constrained)):
        print(f"{name}: {sacrebleu.corpus_bleu(out, [references]).score:.2f} BLEU")
    print(
        f"seconds: plain {plain_seconds:.1f} and {plain_again:.1f}, constrained "
        f"{constrained_seconds:.1f}"
    )


if __name__ == "__main__":
    main()
