"""Attention options end to end (issue 21): a short training run with each, its attention
diagnostics, the checkpoint that records it, `translator info`, translation on CPU, and the
CTranslate2 export that refuses it by name."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.train.conftest import variant
from translator import checkpoint, export, loading, summary, translate
from translator.config import ModelConfig
from translator.errors import TranslatorError
from translator.train import loop

RUNS = [
    pytest.param(
        [
            "model.positions=relative",
            "model.relative_per_layer=true",
            "model.relative_buckets=16",
            "model.attention_window=4",
        ],
        {"positions": "relative", "relative_per_layer": True, "attention_window": 4},
        "sliding window 4, relative bias (16 buckets to distance 128, per layer)",
        id="relative-window",
    ),
    pytest.param(
        ["model.attention=linear"],
        {"attention": "linear"},
        "encoder linear (elu+1 kernel), decoder softmax, no window",
        id="linear",
    ),
]


@pytest.mark.parametrize("overrides, fields, described", RUNS)
def test_trained_with_the_option_and_recorded(prepared, tmp_path, overrides, fields, described):
    run_dir = tmp_path / "run"
    cfg = variant(prepared, run_dir, "train.max_updates=2", "train.eval_every=2", *overrides)
    loop.run(cfg, quiet=True)
    ckpt = run_dir / "last.pt"

    model, saved, _ = checkpoint.load(ckpt)  # the checkpoint records the option...
    assert {name: getattr(saved.model, name) for name in fields} == fields
    again = torch.load(ckpt, weights_only=False)["model"]
    assert all(torch.equal(again[k], v) for k, v in model.state_dict().items())
    if fields.get("positions") == "relative":  # ...and the bias tables, one per layer
        assert len(model.decoder_bias.tables) == cfg.model.n_decoder_layers

    assert described in summary.describe(str(ckpt), [])
    assert described in summary.describe(str(run_dir / "config.yaml"), [])

    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    entropy = {t.split("/")[1] for t in events.Tags()["scalars"] if t.startswith("attention_ent")}
    linear = fields.get("attention") == "linear"  # no weights to measure in a linear encoder
    assert entropy == ({"decoder", "cross"} if linear else {"encoder", "decoder", "cross"})

    model, cfg, tokenizer = loading.load(ckpt, "cpu", "fp32")  # converted for CPU decoding
    for beam in (1, 3):
        decode = translate.with_overrides(cfg.decode, beam_size=beam)
        out = translate.translate_lines(model, tokenizer, ["A dog runs.", "Two men."], decode)
        assert len(out) == 2 and all(len(hyps) == 1 for hyps in out)

    if importlib.util.find_spec("ctranslate2") is None:  # an optional extra
        return
    with pytest.raises(TranslatorError, match=f"model.{next(iter(fields))}=") as error:
        export.export_ctranslate2(ckpt, tmp_path / "ct2")
    assert "\n" not in str(error.value) and "trains with --set model." in error.value.fix


def test_export_names_every_option_it_cannot_express():
    problems = export.unsupported(
        ModelConfig(positions="relative", attention_window=8, n_heads=4, d_model=32)
    )
    assert [(what.split(" ")[0], instead) for what, instead in problems] == [
        ("model.positions=relative", "model.positions=sinusoidal"),
        ("model.attention_window=8", "model.attention_window=0"),
    ]
    ((what, instead),) = export.unsupported(ModelConfig(attention="linear"))
    assert what.startswith("model.attention=linear") and instead == "model.attention=softmax"
    assert export.unsupported(ModelConfig(positions="rope"))[0][1] == "model.positions=sinusoidal"
    assert export.unsupported(ModelConfig()) == []
