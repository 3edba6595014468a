"""Attention diagnostics during training: what the seed articles check by hand, at every validation.

At start-up the Q and K projection scales of every layer are compared. At each validation a
fixed set of valid sentences (the first `diagnostics.sentences`, teacher-forced with their
references) is run once more to log, per layer and head, the mean normalised attention entropy;
per layer, the mean Jensen-Shannon divergence between heads (with a figure per attention kind);
and heatmaps of the first and last layer of each kind for the first `image_sentences`. The log
warns once per condition and layer (a run's warnings would otherwise repeat at every validation).
"""

from __future__ import annotations

import time

import torch

from translator.config import Config
from translator.data.shards import TokenArray
from translator.data.tokenizer import Tokenizer
from translator.diagnostics.capture import Forced, forced_attention, qk_scales
from translator.diagnostics.figures import tiles_image
from translator.diagnostics.stats import LayerStats, allowed_keys, layer_stats
from translator.model.transformer import Transformer
from translator.prepared import prepared_dir
from translator.train.metrics import Metrics

NAMES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}


class AttentionMonitor:
    """Holds the fixed sentences and which warnings were given; `check_scales` once, `log` per
    validation."""

    def __init__(self, cfg: Config, tokenizer: Tokenizer) -> None:
        self.cfg, self.tokenizer = cfg.diagnostics, tokenizer
        folder = prepared_dir(cfg.data)
        src, tgt = TokenArray(folder / "valid.src"), TokenArray(folder / "valid.tgt")
        limit = cfg.model.max_positions - 1  # + EOS / BOS
        self.src_ids: list[list[int]] = []
        self.tgt_ids: list[list[int]] = []
        for i in range(len(src)):
            if len(self.src_ids) == self.cfg.sentences:
                break
            if 0 < len(src[i]) <= limit and len(tgt[i]) <= limit:
                self.src_ids.append(list(src[i]))
                self.tgt_ids.append(list(tgt[i]))
        self.warned: set[tuple[str, str, int]] = set()  # (condition, kind, layer)

    def check_scales(self, model: Transformer, metrics: Metrics) -> None:
        """Warn where a layer's Q and K projection weights differ in RMS by more than
        qk_scale_ratio."""
        for kind, layers in qk_scales(model).items():
            for layer, (q, k) in enumerate(layers):
                ratio = max(q, k) / max(min(q, k), 1e-12)
                if ratio > self.cfg.qk_scale_ratio:
                    self._warn(
                        metrics,
                        "qk-scale",
                        kind,
                        layer,
                        f"Q and K projection weights differ in scale {ratio:.1f}x (RMS {q:.3g} vs "
                        f"{k:.3g}): attention starts near-uniform or near-one-hot; initialise them "
                        "alike",
                    )

    @torch.no_grad()
    def log(self, model: Transformer, step: int, metrics: Metrics) -> float:
        """Entropy and diversity scalars, figures and warnings for `step`; returns the seconds it
        took."""
        began = time.time()
        if not self.src_ids:
            return 0.0
        was_training = model.training
        model.eval()
        forced = forced_attention(model, self.src_ids, self.tgt_ids)
        model.train(was_training)
        for kind in forced.maps:  # a linear encoder has no weights (capture.without_weights)
            stats = [
                layer_stats(w, allowed_keys(kind, forced.src_valid, forced.tgt_valid)[0], self.cfg)
                for w in forced.maps[kind]
            ]
            for layer, st in enumerate(stats):
                metrics.scalars(
                    step,
                    {f"layer{layer}/head{h}": v for h, v in enumerate(st.normalised)},
                    f"attention_entropy/{kind}",
                )
                metrics.scalars(
                    step, {f"layer{layer}": st.diversity}, f"attention_diversity/{kind}"
                )
                self._flag(metrics, kind, layer, st, step)
            # per layer, the (H, H) divergences side by side, 0 (identical heads) to 1 (disjoint)
            metrics.image(
                step,
                f"attention/{kind}/diversity",
                tiles_image([st.divergence for st in stats], 1.0, 8),
            )
            self._heatmaps(forced, kind, step, metrics)
        return time.time() - began

    def _heatmaps(self, forced: Forced, kind: str, step: int, metrics: Metrics) -> None:
        """First and last layer of `kind` for the first image_sentences sentences:
        the mean of heads, then each.

        Unlabelled images (tokens are in the `attention/sentences` text): labelled matplotlib
        figures would cost far more than the 5% of a validation these may take.
        """
        n_layers = len(forced.maps[kind])
        for i in range(min(self.cfg.image_sentences, len(self.src_ids))):
            rows, cols = self._axes(kind, i)
            for layer in sorted({0, n_layers - 1}):
                weights = forced.maps[kind][layer][i, :, :rows, :cols]  # (H, rows, cols)
                metrics.image(
                    step,
                    f"attention/{kind}/layer{layer}/sentence{i}",
                    tiles_image([weights.mean(dim=0), *weights], cell_px=3),
                )

    def _axes(self, kind: str, i: int) -> tuple[int, int]:
        """Rows and columns of sentence i's map: source + EOS, BOS + target (or target + EOS)."""
        S, T = len(self.src_ids[i]) + 1, len(self.tgt_ids[i]) + 1
        return {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}[kind]

    def describe(self, metrics: Metrics) -> None:
        """The image sentences' tokens, once: the images' rows and columns."""
        text = []
        for i in range(min(self.cfg.image_sentences, len(self.src_ids))):
            src = self.tokenizer.sp.id_to_piece(self.src_ids[i]) + ["</s>"]
            tgt = self.tokenizer.target_sp.id_to_piece(self.tgt_ids[i])
            text.append(
                f"**sentence {i}** "
                "(panels: mean of heads, then head 0, 1, ...; rows are queries)  \n"
                f"source (encoder rows and columns, cross columns): `{' '.join(src)}`  \n"
                f"decoder inputs (decoder columns): `{' '.join(['<s>', *tgt])}`  \n"
                f"decoder outputs (decoder and cross rows): `{' '.join([*tgt, '</s>'])}`"
            )
        if text:
            metrics.text(0, "attention/sentences", "\n\n".join(text))

    def _flag(self, metrics: Metrics, kind: str, layer: int, st: LayerStats, step: int) -> None:
        if st.duplicates:
            groups = ", ".join("=".join(map(str, g)) for g in st.duplicates)
            self._warn(
                metrics,
                "duplicate",
                kind,
                layer,
                f"heads {groups} attend alike at update {step} (Jensen-Shannon <= "
                f"{self.cfg.duplicate_divergence}): no diversity; raise dropout or revisit the "
                "initialisation",
            )
        if st.uniform:
            self._warn(
                metrics,
                "uniform",
                kind,
                layer,
                f"heads {st.uniform} are near-uniform at update {step} (normalised entropy >= "
                f"{self.cfg.uniform_entropy}): Q and K have learned no matching",
            )
        if st.one_hot:
            self._warn(
                metrics,
                "one-hot",
                kind,
                layer,
                f"heads {st.one_hot} are near-one-hot at update {step} (normalised entropy <= "
                f"{self.cfg.one_hot_entropy}): a saturated softmax, whose gradients vanish",
            )

    def _warn(self, metrics: Metrics, condition: str, kind: str, layer: int, message: str) -> None:
        if (condition, kind, layer) not in self.warned:
            self.warned.add((condition, kind, layer))
            metrics.warning(f"{NAMES[kind]} layer {layer}: {message}")
