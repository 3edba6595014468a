"""The diagnostics section: thresholds of the attention checks (`translator attention`, training's
validations) and their off switch."""

from __future__ import annotations

from dataclasses import dataclass

from translator.config.checks import check_range
from translator.errors import TranslatorError


@dataclass(kw_only=True)
class DiagnosticsConfig:
    enabled: bool = True
    """Attention diagnostics at each validation: TensorBoard entropy, head diversity and heatmaps,
    and log warnings."""
    sentences: int = 8
    """Valid sentences (the first N, teacher-forced with their references) whose attention the
    statistics average."""
    image_sentences: int = 2
    """How many of those diagnostics.sentences get heatmap images in TensorBoard (first and last
    layer of each attention kind; 0 = none)."""
    uniform_entropy: float = 0.95
    """A head whose mean attention entropy, divided by log(number of keys), is at least this is
    flagged near-uniform."""
    one_hot_entropy: float = 0.05
    """A head whose mean attention entropy, divided by log(number of keys), is at most this is
    flagged near-one-hot (a saturated softmax)."""
    duplicate_divergence: float = 0.02
    """Two heads whose mean Jensen-Shannon divergence (bits, 0-1) is at most this are flagged
    near-duplicates."""
    qk_scale_ratio: float = 2.0
    """Warn at start-up when a layer's Q and K projection weights differ in RMS by more than this
    factor."""

    def __post_init__(self) -> None:
        check_range("diagnostics", self, "sentences image_sentences", 0)
        check_range(
            "diagnostics", self, "uniform_entropy one_hot_entropy duplicate_divergence", 0, 1
        )
        check_range("diagnostics", self, "qk_scale_ratio", 1)
        if self.one_hot_entropy >= self.uniform_entropy:
            raise TranslatorError(
                f"one_hot_entropy={self.one_hot_entropy} is not below uniform_entropy="
                f"{self.uniform_entropy}",
                "diagnostics.one_hot_entropy",
                "keep one_hot_entropy < uniform_entropy",
            )
