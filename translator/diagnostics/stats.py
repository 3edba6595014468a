"""What attention maps say about a layer's heads: entropy, pairwise divergence, duplicates,
collapse.

Pure functions of weights (B, H, T, L) and of which keys each query row may attend (bool, True =
may attend). Rows that are padding, and rows with fewer than two keys (the first decoder position
sees only BOS: its "distribution" says nothing), are left out of every mean; masked keys never
enter a sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from translator.config import DiagnosticsConfig


def allowed_keys(
    kind: str, src_valid: torch.Tensor, tgt_valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which keys each query may attend (B, 1, T, L) and which query rows are real (B, T).

    src_valid (B, S) and tgt_valid (B, T) are True at real tokens. `kind` is encoder, decoder or
    cross.
    """
    if kind == "encoder":
        rows, keys = src_valid, src_valid[:, None, None, :]  # (B, S), (B, 1, 1, S)
    elif kind == "cross":
        rows, keys = tgt_valid, src_valid[:, None, None, :]
    elif kind == "decoder":
        T = tgt_valid.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_valid.device).tril()  # (T, T)
        rows, keys = tgt_valid, causal & tgt_valid[:, None, None, :]
    else:
        raise ValueError(f"unknown attention kind {kind!r}")
    allowed = keys.expand(-1, 1, rows.shape[1], -1) & rows[:, None, :, None]  # (B, 1, T, L)
    return allowed, rows


def row_entropy(weights: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row (..., T, L) -> (..., T) over its allowed keys; 0 log 0 = 0."""
    p = weights.float().masked_fill(~allowed, 0.0)
    return -torch.special.xlogy(p, p).sum(dim=-1)


def _informative_rows(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, 1, T) rows with at least two keys, and the (B, 1, T) key counts."""
    n_keys = allowed.sum(dim=-1)
    return n_keys >= 2, n_keys


def head_entropy(weights: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean row entropy per head (H,) in nats, and mean of entropy / log(row's key count) (H,) in
    [0, 1]."""
    use, n_keys = _informative_rows(allowed)  # (B, 1, T)
    ent = row_entropy(weights, allowed)  # (B, H, T)
    norm = ent / n_keys.clamp(min=2).float().log()
    use = use.expand_as(ent)
    count = use.sum(dim=(0, 2)).clamp(min=1)  # (H,)
    return (ent * use).sum(dim=(0, 2)) / count, (norm * use).sum(dim=(0, 2)) / count


def head_divergence(weights: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """(H, H) mean Jensen-Shannon divergence in bits (0 = the same map, 1 = disjoint) between heads'
    rows.

    JS(P, Q) = H((P + Q) / 2) - (H(P) + H(Q)) / 2, with the heads' row entropies computed once.
    """
    use, _ = _informative_rows(allowed)  # (B, 1, T)
    p = weights.float().masked_fill(~allowed, 0.0)  # (B, H, T, L)
    ent = row_entropy(p, allowed)  # (B, H, T)
    H, rows = p.shape[1], use.sum().clamp(min=1)
    out = torch.zeros(H, H)
    for h in range(H):  # one head against all: (B, H, T, L) at a time, never (B, H, H, T, L)
        mid = (p[:, h : h + 1] + p) / 2
        mid_ent = -torch.special.xlogy(mid, mid).sum(dim=-1)  # masked keys are already 0 in both
        js = (mid_ent - (ent[:, h : h + 1] + ent) / 2) / math.log(2)  # (B, H, T)
        out[h] = (js * use).sum(dim=(0, 2)).cpu() / rows.cpu()
    return out.clamp(min=0.0)


def duplicate_groups(
    divergence: torch.Tensor, threshold: float, skip: set[int] = frozenset()
) -> list[list[int]]:
    """Groups (two heads or more) linked by divergence <= threshold, heads in `skip` left out."""
    H = divergence.shape[0]
    group = list(range(H))  # union-find parents

    def root(h: int) -> int:
        while group[h] != h:
            h = group[h]
        return h

    for h in range(H):
        for g in range(h + 1, H):
            if h not in skip and g not in skip and divergence[h, g] <= threshold:
                group[root(g)] = root(h)
    members: dict[int, list[int]] = {}
    for h in range(H):
        members.setdefault(root(h), []).append(h)
    return [m for m in members.values() if len(m) > 1]


@dataclass
class LayerStats:
    """One layer of one attention kind: per-head numbers and what they flag."""

    entropy: list[float]  # mean row entropy per head, nats
    normalised: list[float]  # mean entropy / log(number of keys) per head, 0 = one-hot, 1 = uniform
    divergence: torch.Tensor  # (H, H) mean Jensen-Shannon divergence, bits
    uniform: list[int] = field(default_factory=list)  # near-uniform heads
    one_hot: list[int] = field(default_factory=list)  # near-one-hot heads
    duplicates: list[list[int]] = field(default_factory=list)  # groups of near-duplicate heads

    @property
    def diversity(self) -> float:
        """Mean divergence over pairs of distinct heads (0 with one head)."""
        H = self.divergence.shape[0]
        return float(self.divergence.sum() / (H * (H - 1))) if H > 1 else 0.0


def layer_stats(weights: torch.Tensor, allowed: torch.Tensor, cfg: DiagnosticsConfig) -> LayerStats:
    """Entropy, divergence and flags of one layer's weights (B, H, T, L) with
    `allowed` (B, 1, T, L)."""
    entropy, normalised = head_entropy(weights, allowed)
    divergence = head_divergence(weights, allowed)
    if not _informative_rows(allowed)[0].any():  # no row with a choice (a one-token target):
        return LayerStats(entropy.tolist(), normalised.tolist(), divergence)  # nothing to flag
    uniform = [h for h, v in enumerate(normalised.tolist()) if v >= cfg.uniform_entropy]
    one_hot = [h for h, v in enumerate(normalised.tolist()) if v <= cfg.one_hot_entropy]
    # heads that attend to nothing in particular are alike trivially: "near-uniform" says it better
    duplicates = duplicate_groups(divergence, cfg.duplicate_divergence, skip=set(uniform))
    return LayerStats(
        entropy.tolist(), normalised.tolist(), divergence, uniform, one_hot, duplicates
    )
