"""Noisy-channel reranking (Yee et al. 2019): pick from the direct model's n-best with a model of
the reverse direction.

For a source x and the candidates y of the direct model p(y|x) (a beam's n-best), the one kept
maximises

    log p(y|x) / lp(|y|)  +  weight * log p(x|y) / lp(|x|)

each log-probability normalised by the GNMT length penalty lp of its own output length (the
beam's alpha; |.| counts EOS). The channel model p(x|y), trained on the same pairs the other way
round, asks how well the source can be read back from a candidate: it prefers the candidates
that keep all of the source's content, which the direct model's own score and a length penalty
cannot tell from candidates that are merely longer (docs/experiments.md, item 36).
"""

from __future__ import annotations

from dataclasses import dataclass

from translator.data.tokenizer import Tokenizer
from translator.decode.beam import length_penalty
from translator.decode.forced import target_log_probs
from translator.model.ensemble import Ensemble
from translator.model.transformer import Transformer


@dataclass
class Channel:
    """A reverse-direction model (or ensemble) and how its score is weighed against the direct one:
    `weight`, the length penalty's `alpha`, the n-best size the direct search produces for it to
    choose from (`candidates`), and source tokens per scoring batch."""

    model: Transformer | Ensemble
    tokenizer: Tokenizer
    weight: float
    alpha: float
    candidates: int
    batch_tokens: int = 4096

    def rerank(
        self, sources: list[str], nbests: list[list[tuple[str, float]]]
    ) -> list[list[tuple[str, float]]]:
        """Per source, its (translation, direct score) candidates -> (translation, combined score),
        best first. A source with one candidate (an empty or over-long line), or with a side longer
        than the channel model's positions, keeps its candidates as they are."""
        limit = self.model.cfg.max_positions - 1  # tokens the channel reads or scores, with EOS
        lengths = [len(ids) + 1 for ids in self.tokenizer.target_sp.encode(sources)]  # with EOS
        longest = [
            max((len(ids) for ids in self.tokenizer.encode([t for t, _ in nbest])), default=0)
            for nbest in nbests
        ]
        scored = [
            len(nbest) > 1 and max(length - 1, read) <= limit
            for nbest, length, read in zip(nbests, lengths, longest)
        ]
        pairs = [(i, text) for i, nbest in enumerate(nbests) if scored[i] for text, _ in nbest]
        scores = source_log_probs(
            self.model,
            self.tokenizer,
            [sources[i] for i, _ in pairs],
            [text for _, text in pairs],
            self.batch_tokens,
        )
        channel = iter(scores)
        out = []
        for i, nbest in enumerate(nbests):
            if not scored[i]:
                out.append(nbest)
                continue
            norm = length_penalty(lengths[i], self.alpha)
            rescored = [(text, score + self.weight * next(channel) / norm) for text, score in nbest]
            out.append(sorted(rescored, key=lambda candidate: -candidate[1]))
        return out


def source_log_probs(
    model: Transformer | Ensemble,
    tokenizer: Tokenizer,
    sources: list[str],
    translations: list[str],
    batch_tokens: int = 4096,
) -> list[float]:
    """log p(source | translation) under the channel `model`: the sum over the source's tokens and
    its EOS, teacher forced (an ensemble: the log of its members' mean probability per token)."""
    # the channel reads translations and scores the sources
    src_ids, tgt_ids = tokenizer.encode(translations), tokenizer.target_sp.encode(sources)
    return target_log_probs(model, src_ids, tgt_ids, batch_tokens)
