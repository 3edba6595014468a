"""Lexically constrained beam search: every output holds each of its sentence's given phrases.

Dynamic beam allocation (Post & Vilar 2018; Sockeye's and fairseq's `--constraints`). A sentence
with C constraint tokens splits its k beam slots into C + 1 banks by how many of those tokens a
hypothesis has produced; each step every open beam proposes its k + 1 best tokens and also the
next token of each phrase it has not yet met, and each bank keeps its best proposals, so that
hypotheses that placed a constraint are not crowded out by unconstrained ones that the model
prefers. Slots a bank cannot fill go to the proposals furthest along. EOS is allowed only once all
the phrases are met (or at the length limit, where only EOS is: such an output ranks below
every one that meets them).

Which phrases a hypothesis holds is read from its output itself: a phrase is met when the output
ends with it, and a partial match is the longest start of an unmet phrase that the output ends
with. So a broken phrase can restart anywhere, and overlapping phrases are counted right.

The bank bookkeeping is per sentence and per proposal, in Python: a handful of proposals per beam,
next to a decoder step over the whole batch. The model steps run batched as in beam_search
(decode/beam.py), with the same scores (summed log-probs over the GNMT length penalty), the same
finished buffer and the same stopping test; with no constraints it finds what beam_search finds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from translator.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from translator.decode import (
    Hypothesis,
    ban_repeated_ngrams_,
    ban_tokens_,
    eos_allowed_from,
    log_softmax_into,
    max_lengths,
)
from translator.decode.beam import length_penalty, only_eos_, top_k
from translator.decode.step import decoding_step
from translator.model.transformer import Transformer

Phrase = tuple[int, ...]


@dataclass(frozen=True)
class Beam:
    score: float  # summed log-probs
    output: tuple[int, ...]  # output ids so far (no BOS)
    met: frozenset[int]  # indices of the phrases the output holds


@dataclass(frozen=True)
class Proposal:
    score: float
    origin: int  # the beam slot it continues
    token: int
    met: frozenset[int]
    bank: int  # constraint tokens produced: met phrases' lengths + the longest partial match


def partial_match(output: tuple[int, ...], phrase: Phrase) -> int:
    """The length of the longest proper start of `phrase` that `output` ends with (0: none)."""
    for j in range(min(len(phrase) - 1, len(output)), 0, -1):
        if output[-j:] == phrase[:j]:
            return j
    return 0


def extend(phrases: list[Phrase], beam: Beam, token: int) -> tuple[frozenset[int], int]:
    """The met phrases and the bank of `beam` extended by `token`."""
    output = beam.output + (token,)
    met = beam.met | {q for q, p in enumerate(phrases) if output[-len(p) :] == p}
    partial = max(
        (partial_match(output, p) for q, p in enumerate(phrases) if q not in met), default=0
    )
    return met, sum(len(phrases[q]) for q in met) + partial


def next_phrase_tokens(phrases: list[Phrase], beam: Beam) -> set[int]:
    """The tokens that start or continue an unmet phrase after `beam`'s output."""
    tokens = set()
    for q, phrase in enumerate(phrases):
        if q not in beam.met:
            tokens |= {phrase[0], phrase[partial_match(beam.output, phrase)]}
    return tokens


def allocate(proposals: list[Proposal], k: int, banks: int) -> list[Proposal]:
    """The k proposals kept, best first: each bank (0 .. banks - 1) gets k // banks slots, the
    remainder going to the banks furthest along, filled by score; the slots a bank cannot fill
    go to the proposals left in the banks furthest along, which places more constraints than
    filling them by score (why: docs/benchmarks.md, constrained decoding)."""
    quota = [k // banks] * banks
    for bank in range(banks - k % banks, banks):
        quota[bank] += 1
    kept, left = [], []
    for proposal in sorted(proposals, key=lambda p: -p.score):
        if quota[proposal.bank]:
            quota[proposal.bank] -= 1
            kept.append(proposal)
        else:
            left.append(proposal)
    kept += sorted(left, key=lambda p: -p.bank)[: k - len(kept)]  # stable: by score in a bank
    return sorted(kept, key=lambda p: -p.score)


def check_constraints(constraints: list[list[list[int]]], sentences: int, limit: int) -> None:
    """Refuse what the search cannot honour: a list per sentence of phrases of output ids."""
    if len(constraints) != sentences:
        raise ValueError(f"{len(constraints)} constraint lists for {sentences} sentences")
    for phrases in constraints:
        if any(not phrase for phrase in phrases):
            raise ValueError("a constraint is empty: give at least one output id")
        if any(t in (PAD_ID, BOS_ID, EOS_ID) for phrase in phrases for t in phrase):
            raise ValueError("a constraint holds PAD, BOS or EOS: give output ids only")
        if sum(map(len, phrases)) > limit:
            raise ValueError(
                f"the constraints are longer than the model's {limit} output positions"
            )


@torch.inference_mode()
def constrained_beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    constraints: list[list[list[int]]],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 0,
    nbest: int = 1,
    no_repeat_ngram: int = 0,
    unk_penalty: float = 0.0,
    word_inner: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """src (B, S), src_mask (B, 1, 1, S), per sentence its phrases (output ids each) -> per
    sentence its min(nbest, k) best hypotheses, best first, those that hold every phrase before
    any that does not.

    Scores as beam_search's. Each sentence's length limit grows by its constraints' tokens. A
    beam narrower than a sentence's constraint tokens + 1 leaves its lower banks no slot, so the
    phrases go in first; a wider one places them where the model likes. `word_inner` (V,) bool:
    the ids that go on inside a word, which may not follow a phrase (a term stays a whole word:
    "Wolle" not "Wolleer"). A sentence that is done leaves the batch.
    """
    B, k, n, device = src.shape[0], beam_size, min(nbest, beam_size), src.device
    limit = model.cfg.max_positions - 1
    check_constraints(constraints, B, limit)
    phrases = [[tuple(p) for p in sentence] for sentence in constraints]
    needed = torch.tensor([sum(map(len, p)) for p in phrases], device=device)
    # (B,) room for the translation and its phrases
    max_lens = (max_lengths(src_mask, max_len_a, max_len_b, limit) + needed).clamp(max=limit)
    eos_from = eos_allowed_from(max_lens, min_len).repeat_interleave(k)  # (B*k,)
    steps = int(max_lens.max()) + 1  # the last step can only emit EOS
    longest_penalty = length_penalty(max_lens + 1, alpha).tolist()  # (B,)
    limits = max_lens.tolist()
    m = min(k + 1, model.cfg.vocab_size) if k > 1 else 1  # as beam_search proposes
    if word_inner is not None:
        inner = word_inner.nonzero().squeeze(1).to(device)[None, :]  # (1, I)

    # 0. Encode once; beams share their sentence's memory and cross-attention K/V (beam_search).
    memory = model.encode(src, src_mask)  # (B, S, D)
    cache = model.new_cache(B * k, steps, memory.dtype, device, fixed_shapes=False, beams=k)
    next_logits = decoding_step(model, memory, src_mask, cache)
    tokens = torch.full((B * k, steps + 1), PAD_ID, dtype=torch.long, device=device)
    tokens[:, 0] = BOS_ID
    vocab_buffer = torch.empty(B * k, model.cfg.vocab_size, device=device, dtype=torch.float32)
    # per sentence its k slots (None: empty) and its finished (all met, normalised score, output)
    beams: list[list[Beam | None]] = [
        [Beam(0.0, (), frozenset())] + [None] * (k - 1) for _ in range(B)
    ]
    finished: list[list[tuple[bool, float, tuple[int, ...]]]] = [[] for _ in range(B)]
    done = [False] * B
    live = list(range(B))  # the sentences still in the batch, in its order (CTranslate2's drop)

    for step in range(steps):
        # 1. Next-token log-probs of every beam; EOS only for beams that hold every phrase.
        logits = next_logits(tokens[:, step : step + 1])  # (B*k, 1, V)
        cache.advance(1)
        log_probs = log_softmax_into(vocab_buffer, logits[:, -1])  # (B*k, V)
        ban_tokens_(log_probs, step, eos_from, unk_penalty)
        unmet = [
            beam is not None and len(beam.met) < len(phrases[b]) and step < limits[b]
            for b in live
            for beam in beams[b]
        ]
        log_probs[torch.tensor(unmet, device=device), EOS_ID] = float("-inf")
        only_eos_(log_probs, (step >= max_lens).repeat_interleave(k))
        if word_inner is not None:  # no piece glued to a phrase just completed
            glued = [
                row * k + i
                for row, b in enumerate(live)
                for i, beam in enumerate(beams[b])
                if beam is not None and any(beam.output[-len(p) :] == p for p in phrases[b])
            ]
            if glued:
                log_probs[torch.tensor(glued, device=device)[:, None], inner] = float("-inf")
        if no_repeat_ngram:
            every_row = torch.ones_like(eos_from, dtype=torch.bool)
            ban_repeated_ngrams_(log_probs, tokens, step, no_repeat_ngram, every_row)

        # 2. Proposals: each open beam's k + 1 best tokens and its phrases' next tokens.
        values, proposed = (x.tolist() for x in top_k(log_probs, m))  # (B*k, m) each
        wanted = [
            (row * k + i, t)
            for row, b in enumerate(live)
            for i, beam in enumerate(beams[b])
            if beam is not None
            for t in next_phrase_tokens(phrases[b], beam)
        ]
        rows, ids = zip(*wanted) if wanted else ((), ())
        phrase_values = log_probs[list(rows), list(ids)].tolist()
        by_row: dict[int, dict[int, float]] = {}
        for row, t, v in zip(rows, ids, phrase_values):
            by_row.setdefault(row, {})[t] = v
        for row in range(len(live) * k):
            by_row.setdefault(row, {}).update(zip(proposed[row], values[row]))

        # 3. Per sentence: an EOS proposal goes to the finished buffer (those that hold every
        #    phrase first), the others into banks, which keep the next open beams (allocate).
        origins, next_tokens = [], []
        for row, b in enumerate(live):
            proposals = []
            for i, beam in enumerate(beams[b]):
                if beam is None:
                    continue
                for t, v in by_row[row * k + i].items():
                    if v == float("-inf"):
                        continue
                    if t == EOS_ID:
                        met_all = len(beam.met) == len(phrases[b])
                        normalised = (beam.score + v) / length_penalty(step + 1, alpha)
                        finished[b].append((met_all, normalised, beam.output))
                    else:
                        met, bank = extend(phrases[b], beam, t)
                        proposals.append(Proposal(beam.score + v, i, t, met, bank))
            finished[b] = sorted(finished[b], key=lambda f: (f[0], f[1]), reverse=True)[:n]
            total = sum(map(len, phrases[b]))
            kept = allocate(proposals, k, total + 1)
            slots = [Beam(p.score, beams[b][p.origin].output + (p.token,), p.met) for p in kept]
            beams[b] = slots + [None] * (k - len(slots))
            origins += [row * k + p.origin for p in kept] + [row * k] * (k - len(kept))
            next_tokens += [p.token for p in kept] + [PAD_ID] * (k - len(kept))

            # 4. Done when its n-th best finished holds every phrase and no open beam can beat it.
            open_scores = [beam.score for beam in beams[b] if beam is not None]
            bound = max(longest_penalty[b], length_penalty(step + 2, alpha))
            best_open = max(open_scores, default=float("-inf")) / bound
            nth = finished[b][n - 1] if len(finished[b]) >= n else None
            if not open_scores or (nth is not None and nth[0] and best_open <= nth[1]):
                done[b] = True
                beams[b] = [None] * k
        if all(done):
            break
        # 5. The open beams' tokens gathered by origin; the cache reorders its self-attention K/V.
        rows_t = torch.tensor(origins, device=device)
        tokens = tokens.index_select(0, rows_t)
        tokens[:, step + 1] = torch.tensor(next_tokens, device=device)
        cache.reorder(rows_t)

        # 6. Done sentences leave the batch, as in beam_search: the others' rows, memory and cache
        #    stay (their results are already in `finished`).
        if any(done[b] for b in live):
            kept_rows = [row for row, b in enumerate(live) if not done[b]]
            keep = torch.tensor(kept_rows, device=device)  # (B',)
            rows_t = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)  # (B'*k,)
            live = [live[row] for row in kept_rows]
            tokens, eos_from, max_lens = tokens[rows_t], eos_from[rows_t], max_lens[keep]
            memory, src_mask, vocab_buffer = (
                memory[keep],
                src_mask[keep],
                vocab_buffer[: len(rows_t)],
            )
            cache.reorder(rows_t, sentences=keep)
            next_logits = decoding_step(model, memory, src_mask, cache)

    return [
        [Hypothesis(list(output), score) for _, score, output in ends]
        or [Hypothesis([], float("-inf"))]
        for ends in finished
    ]
