"""Interactive translation on real text: prefixes cut inside a word of the reference, completed.

    .venv/bin/python -m bench.prefix_completion runs/multi30k-en-de/avg.pt \
        ../shared/data/multi30k/valid.en ../shared/data/multi30k/valid.de --beam 5

A translator has typed the reference up to a random character inside one of its words (seeded,
never at the word's end). Each line is translated with that prefix twice: as `translate --prefix`
does, the last word spelled as text (guided.split_prefix), and with the whole prefix forced as
pieces, as before (split_prefix's fallback). Printed for each: the share of lines whose typed word
is completed as the reference has it (the proposal a CAT tool would show next), sacreBLEU of the
outputs against the references, and the seconds.
"""

from __future__ import annotations

import random
import re
import time

import sacrebleu
import torch

from bench import parallel_text
from translator import guided
from translator.translate import translate_lines, with_overrides


def cut_inside_a_word(reference: str, rng: random.Random) -> tuple[str, str]:
    """(the prefix, the word it cuts), the cut after 1 to len - 1 of the word's characters;
    ("", "") for a reference without a word of 2 letters or more."""
    words = [m for m in re.finditer(r"\w{2,}", reference)]
    if not words:
        return "", ""
    word = rng.choice(words)
    cut = word.start() + rng.randint(1, len(word.group()) - 1)
    return reference[:cut], word.group()


def main() -> None:
    parser = parallel_text.parser(__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    (model, cfg, tokenizer), sources, references = parallel_text.model_and_text(args)
    rng = random.Random(args.seed)
    cuts = [cut_inside_a_word(r, rng) for r in references]
    prefixes = [prefix for prefix, _ in cuts]
    decode = with_overrides(cfg.decode, beam_size=args.beam)
    spelled = guided.split_prefix

    def forced(tokenizer, prefix, data, limit):  # the whole prefix as pieces: the old behaviour
        ids, _, _ = spelled(tokenizer, prefix, data, 0)  # no room to spell: forced whole
        return ids, "", len(ids)

    print(f"{len(sources)} lines, beam {args.beam}, {torch.get_num_threads()} threads, fp32")
    for name, split in (("spelled", spelled), ("forced", forced), ("spelled again", spelled)):
        guided.split_prefix = split
        began = time.perf_counter()
        found = translate_lines(
            model, tokenizer, sources, decode, warn=None, data=cfg.data, prefixes=prefixes
        )
        seconds = time.perf_counter() - began
        outputs = [hyps[0][0] for hyps in found]
        whole = sum(
            bool(word) and _typed_word(out, prefix) == word
            for out, (prefix, word) in zip(outputs, cuts)
        )
        starts = sum(out.startswith(prefix) for out, prefix in zip(outputs, prefixes))
        bleu = sacrebleu.corpus_bleu(outputs, [references]).score
        print(
            f"{name}: typed word completed as the reference has it {whole}/{len(sources)} "
            f"({100 * whole / len(sources):.1f}%); outputs starting with the prefix {starts}; "
            f"BLEU {bleu:.2f}; {seconds:.1f} s"
        )
    guided.split_prefix = spelled


def _typed_word(output: str, prefix: str) -> str:
    """The word of `output` that the prefix's last characters start."""
    start = len(prefix) - len(re.search(r"\w*$", prefix).group())
    match = re.match(r"\w*", output[start:])
    return match.group() if match else ""


if __name__ == "__main__":
    main()
