"""Training's attention diagnostics: TensorBoard entropy, diversity and images; warnings once per
condition and layer."""

from __future__ import annotations

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.train.conftest import variant
from translator.train import loop
from translator.train.attention import AttentionMonitor


class Lines:
    """Stands in for Metrics: keeps log lines, scalar tags and image tags."""

    def __init__(self) -> None:
        self.lines, self.scalar_tags, self.images = [], [], []

    def line(self, message: str) -> None:
        self.lines.append(message)

    def warning(self, message: str) -> None:  # as Metrics.warning writes it into the log
        self.line(f"warning: {message}")

    def scalars(self, step, values, prefix) -> None:
        self.scalar_tags += [f"{prefix}/{k}" for k in values]

    def image(self, step, tag, image) -> None:
        self.images.append(tag)


def test_training_logs_attention_to_tensorboard_and_its_cost(prepared, tmp_path):
    cfg = variant(
        prepared,
        tmp_path / "run",
        "train.max_updates=2",
        "train.eval_every=2",
        "diagnostics.sentences=8",
        "diagnostics.image_sentences=1",
    )
    loop.run(cfg, quiet=True)
    events = EventAccumulator(
        str(tmp_path / "run" / "tensorboard"), size_guidance={"images": 0}
    ).Reload()
    scalars, images = events.Tags()["scalars"], events.Tags()["images"]
    n_heads, n_layers = cfg.model.n_heads, cfg.model.n_encoder_layers
    for kind in ("encoder", "decoder", "cross"):
        for layer in range(n_layers):
            assert f"attention_diversity/{kind}/layer{layer}" in scalars
            for h in range(n_heads):
                values = [
                    e.value
                    for e in events.Scalars(f"attention_entropy/{kind}/layer{layer}/head{h}")
                ]
                assert len(values) == 1 and 0 <= values[0] <= 1
        assert f"attention/{kind}/diversity" in images
        assert {
            f"attention/{kind}/layer0/sentence0",
            f"attention/{kind}/layer{n_layers - 1}/sentence0",
        } <= set(images)
    image = events.Images("attention/cross/layer0/sentence0")[0]
    panel = (image.width + 2) // (n_heads + 1)  # the mean of heads, then each head, 2 pixels apart
    assert (
        panel * (n_heads + 1) == image.width + 2 and (panel - 2) % 3 == 0 and image.height % 3 == 0
    )
    # the images' tokens, as text
    assert "attention/sentences/text_summary" in events.Tags()["tensors"]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "attention diagnostics: " in log and "% of the validation's" in log


def test_switched_off_nothing_is_logged(prepared, tmp_path):
    cfg = variant(
        prepared,
        tmp_path / "run",
        "train.max_updates=2",
        "train.eval_every=2",
        "diagnostics.enabled=false",
    )
    loop.run(cfg, quiet=True)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert not [t for t in events.Tags()["scalars"] if t.startswith("attention")]
    assert "attention diagnostics" not in (tmp_path / "run" / "train.log").read_text()


def test_warnings_come_once_per_condition_and_layer(prepared, tmp_path):
    from translator.data.tokenizer import Tokenizer
    from translator.model.transformer import Transformer
    from translator.prepared import load_manifest, prepared_dir

    cfg = variant(
        prepared, tmp_path / "run", "diagnostics.sentences=4", "diagnostics.image_sentences=0"
    )
    tokenizer = Tokenizer(prepared_dir(cfg.data) / load_manifest(cfg.data)["vocab"]["src"]["file"])
    cfg.model.vocab_size = tokenizer.vocab_size
    model = Transformer(cfg.model).eval()
    with torch.no_grad():
        model.encoder[1].self_attn.q_proj.weight.mul_(3.0)  # Q three times K's scale
        attn = model.decoder[0].cross_attn  # heads 0 and 1 made identical: one Q/K/V slice copied
        K = attn.d_head
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight[:K] *= 4  # sharper than uniform, so not set aside as near-uniform
            proj.weight[K : 2 * K] = proj.weight[:K]
            proj.bias[K : 2 * K] = proj.bias[:K]
    monitor, metrics = AttentionMonitor(cfg, tokenizer), Lines()
    monitor.check_scales(model, metrics)
    assert (
        metrics.lines == [metrics.lines[0]]
        and "encoder self-attention layer 1: Q and K" in metrics.lines[0]
    )
    assert "differ in scale 3.0x" in metrics.lines[0]
    monitor.log(model, 10, metrics)
    duplicate = [m for m in metrics.lines if "attend alike" in m]
    assert any(
        m.startswith("warning: cross-attention layer 0: heads 0=1 attend alike") for m in duplicate
    ), metrics.lines
    assert not [m for m in duplicate if "encoder" in m and "heads 0=1" in m]
    count = len(metrics.lines)
    monitor.log(model, 20, metrics)  # the same conditions again: no new line
    assert len(metrics.lines) == count
    assert metrics.scalar_tags.count("attention_entropy/cross/layer0/head0") == 2
