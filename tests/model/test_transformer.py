"""Whole-model properties: causality, source padding, tying, initialisation, parameter count."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from translator import config, prepared, summary
from translator.model.layers import Residual
from translator.model.transformer import Transformer, count_parameters

REPO = Path(__file__).resolve().parents[2]
SCHEMES = [
    dict(positions=p, norm=n) for p in ("sinusoidal", "learned", "rope") for n in ("pre", "post")
]
IDS = [f"{s['positions']}-{s['norm']}LN" for s in SCHEMES]
ON = [
    pytest.param(("cpu", torch.float32, 1e-6), id="cpu-fp32"),
    pytest.param(
        ("cuda", torch.bfloat16, 2e-2),
        id="cuda-bf16",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
        ],
    ),
]


@pytest.mark.parametrize("on", ON)
@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
@torch.no_grad()
def test_future_target_tokens_do_not_change_earlier_outputs(make_model, src_batch, scheme, on):
    device, dtype, tol = on
    model = make_model(n_kv_heads=2, **scheme).to(device, dtype)
    src, src_mask = (t.to(device) for t in src_batch)
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 8), device=device)
    changed = tgt.clone()
    changed[:, 5:] = torch.randint(4, model.cfg.vocab_size, (3, 3), device=device)
    before, after = model(src, tgt, src_mask).float(), model(src, changed, src_mask).float()
    torch.testing.assert_close(after[:, :5], before[:, :5], atol=tol, rtol=tol)
    assert not torch.allclose(after[:, 5:], before[:, 5:])  # the test can see a change


@pytest.mark.parametrize("on", ON)
@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
@torch.no_grad()
def test_padded_source_positions_do_not_change_outputs(make_model, src_batch, scheme, on):
    device, dtype, tol = on
    model = make_model(**scheme).to(device, dtype)
    src, src_mask = (t.to(device) for t in src_batch)
    noise = torch.randint(4, model.cfg.vocab_size, src.shape, device=device)
    changed = torch.where(src_mask[:, 0, 0], src, noise)
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 5), device=device)
    memory, memory_changed = model.encode(src, src_mask), model.encode(changed, src_mask)
    logits, logits_changed = (
        model.decode(tgt, memory, src_mask),
        model.decode(tgt, memory_changed, src_mask),
    )
    real = src_mask[:, 0, 0]  # (B, S)
    torch.testing.assert_close(
        memory_changed[real].float(), memory[real].float(), atol=tol, rtol=tol
    )
    torch.testing.assert_close(logits_changed.float(), logits.float(), atol=tol, rtol=tol)
    assert not torch.allclose(memory_changed[~real], memory[~real])  # pad positions did change


@pytest.mark.parametrize("output_bias", [False, True])
def test_logits_of_chosen_rows_are_those_rows_of_the_whole_targets_logits(
    make_model, src_batch, output_bias
):
    model = make_model(output_bias=output_bias)
    src, src_mask = src_batch
    tgt = torch.randint(4, 40, (3, 5))
    everything = model(src, tgt, src_mask)  # (3, 5, V)
    rows = torch.tensor([0, 1, 2, 5, 6, 12])  # (batch row, position): (0, 0-2), (1, 0-1), (2, 2)
    chosen = model(src, tgt, src_mask, rows)
    expected = torch.stack(
        [everything[b, t] for b, t in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 2)]]
    )
    torch.testing.assert_close(chosen, expected, rtol=1e-5, atol=1e-5)


def test_tied_and_untied_embeddings(make_model):
    tied, untied = make_model(), make_model(tie_embeddings=False)
    assert tied.out_proj.weight is tied.src_embed.token.weight is tied.tgt_embed.token.weight
    assert untied.out_proj.weight is not untied.tgt_embed.token.weight
    assert untied.src_embed.token.weight is not untied.tgt_embed.token.weight
    V, D = tied.cfg.vocab_size, tied.cfg.d_model
    assert count_parameters(untied) - count_parameters(tied) == 2 * V * D


def test_initialisation_ranges():
    cfg = config.ModelConfig(
        vocab_size=2000,
        d_model=128,
        n_heads=8,
        n_kv_heads=2,
        d_ff=256,
        n_encoder_layers=1,
        n_decoder_layers=1,
    )
    model = Transformer(cfg)
    # The shared matrix keeps the embedding init N(0, D^-1/2), not the output projection's Xavier.
    assert model.out_proj.weight.std().item() == pytest.approx(128**-0.5, rel=0.05)
    attn = model.decoder[0].self_attn
    bounds = {
        name: getattr(attn, name).weight.abs().max().item()
        for name in ("q_proj", "k_proj", "v_proj")
    }
    limit = math.sqrt(6 / (2 * 128))
    for name, bound in bounds.items():  # one range for Q and K, also when K has fewer heads (GQA)
        assert limit * 0.95 < bound <= limit, name


def test_embeddings_are_scaled_by_sqrt_d_model(make_model):
    scaled, unscaled = (
        make_model(positions="learned"),
        make_model(positions="learned", scale_embeddings=False),
    )
    unscaled.load_state_dict(scaled.state_dict())
    ids = torch.randint(4, 40, (2, 5))
    pos = scaled.src_embed.learned.weight[:5]
    at = torch.arange(5)
    torch.testing.assert_close(
        scaled.src_embed(ids, at) - pos, (unscaled.src_embed(ids, at) - pos) * math.sqrt(32)
    )


def test_pre_ln_has_final_norms_and_post_ln_does_not(make_model):
    assert isinstance(make_model(norm="pre").decoder_norm, nn.LayerNorm)
    assert isinstance(make_model(norm="post").decoder_norm, nn.Identity)


def test_base_config_matches_the_papers_65m_parameters():
    text = summary.describe(str(REPO / "configs" / "base.yaml"), ["model.vocab_size=37000"])
    cfg = config.load(REPO / "configs" / "base.yaml", ["model.vocab_size=37000"])
    with torch.device("meta"):
        n = count_parameters(Transformer(cfg.model))
    assert abs(n - 65e6) / 65e6 < 0.05, n
    assert f"{n:,}" in text and "d_model 512" in text and "MHA" in text


def test_info_reports_the_smaller_kv_cache_of_gqa_and_mqa():
    base = str(REPO / "configs" / "base.yaml")
    per_token = {}
    for kv in (8, 2, 1):
        text = summary.describe(base, [f"model.n_kv_heads={kv}"])
        line = next(line for line in text.splitlines() if "KV cache" in line)
        per_token[kv] = int(line.split(":")[1].split()[0].replace(",", ""))
    assert per_token == {8: 2 * 6 * 8 * 64, 2: 2 * 6 * 2 * 64, 1: 2 * 6 * 64}


def test_info_names_the_attention_kind():
    base = str(REPO / "configs" / "base.yaml")
    kinds = {kv: summary.describe(base, [f"model.n_kv_heads={kv}"]) for kv in (8, 2, 1)}
    assert (
        "(MHA: kv heads 8" in kinds[8]
        and "(GQA: kv heads 2" in kinds[2]
        and "(MQA: kv heads 1" in kinds[1]
    )


@pytest.mark.parametrize("joint", [True, False])
def test_info_of_an_untrained_config_counts_the_vocabulary_it_will_get(joint):
    tiny = REPO / "configs" / "tiny.yaml"
    overrides = [f"data.joint_vocab={str(joint).lower()}", "data.vocab_size=1000"]
    text = summary.describe(str(tiny), overrides)
    sizes = ["model.vocab_size=1000"] + ([] if joint else ["model.src_vocab_size=1000"])
    with torch.device("meta"):
        n = count_parameters(Transformer(config.load(tiny, overrides + sizes).model))
    assert f"parameters: {n:,}" in text
    assert ("vocabulary 1000," if joint else "vocabulary 1000 src / 1000 tgt,") in text


@pytest.mark.parametrize("joint", [True, False])
def test_info_of_a_config_whose_data_are_prepared_counts_the_prepared_vocabulary(joint, tmp_path):
    # 50,000 asked, 1,677 made (and 1,500 / 1,677 apart): training builds the model for these
    tiny = REPO / "configs" / "tiny.yaml"
    overrides = [
        f"data.data_dir={tmp_path}",
        "data.vocab_size=50000",
        f"data.joint_vocab={str(joint).lower()}",
    ]
    data = config.load(tiny, overrides).data
    text = summary.describe(str(tiny), overrides)
    assert "vocabulary 50000," in text or "vocabulary 50000 src" in text
    assert "vocabulary size from data.vocab_size (" in text and "not prepared yet" in text
    folder = prepared.prepared_dir(data)
    folder.mkdir(parents=True)
    src = 1677 if joint else 1500
    manifest = {
        "settings": prepared.shaping_settings(data),
        "vocab": {"src": {"size": src}, "tgt": {"size": 1677}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    text = summary.describe(str(tiny), overrides)
    sizes = ["model.vocab_size=1677"] + ([] if joint else ["model.src_vocab_size=1500"])
    with torch.device("meta"):
        n = count_parameters(Transformer(config.load(tiny, overrides + sizes).model))
    assert f"parameters: {n:,}" in text
    assert ("vocabulary 1677," if joint else "vocabulary 1500 src / 1677 tgt,") in text
    assert f"vocabulary size from the prepared data ({folder}; data.vocab_size asks 50,000)" in text
    other = summary.describe(str(tiny), [*overrides, "data.max_train_pairs=7"])
    assert "vocabulary size from data.vocab_size (" in other
    assert "is refused: prepared with other data settings" in other
    (folder / "manifest.json").write_text("{")  # cut short: damaged, not other settings
    damaged = summary.describe(str(tiny), overrides)
    assert "is refused: damaged manifest.json" in damaged


def test_ffn_hidden_dropout_is_activation_dropout_not_dropout():
    """fairseq's split: model.dropout leaves the FFN's hidden layer alone; activation_dropout drops
    there."""
    from tests.model.conftest import tiny_config

    model = Transformer(tiny_config(dropout=0.5, activation_dropout=0.0)).train()
    ff = model.encoder[0].ff
    h = torch.randn(4, 5, ff.up.in_features)
    assert torch.equal(ff(h), ff(h))  # no dropout inside the FFN
    model = Transformer(tiny_config(dropout=0.0, activation_dropout=0.5)).train()
    ff = model.encoder[0].ff
    assert not torch.equal(ff(h), ff(h))


def test_gated_ffn_is_the_activated_half_times_the_other_half():
    """SwiGLU written out from the layer's own weights: (silu(x G + g) * (x V + v)) W + w."""
    from tests.model.conftest import tiny_config

    torch.manual_seed(0)
    ff = Transformer(tiny_config(gated_ffn=True, activation="silu", d_ff=48)).decoder[1].ff
    with torch.no_grad():
        ff.up.bias.normal_()  # biases start at zero: make them count
    x = torch.randn(3, 5, 32)
    gate = x @ ff.up.weight[:48].T + ff.up.bias[:48]
    value = x @ ff.up.weight[48:].T + ff.up.bias[48:]
    want = (gate * torch.sigmoid(gate) * value) @ ff.down.weight.T + ff.down.bias
    torch.testing.assert_close(ff(x), want)
    # each half initialised as its own (48, 32) Xavier map, not as one (96, 32) map
    limit = math.sqrt(6 / (32 + 48))
    assert limit * 0.95 < ff.up.weight.abs().max().item() <= limit


def test_gated_ffn_at_two_thirds_the_width_keeps_the_parameter_count():
    from tests.model.conftest import tiny_config

    plain = count_parameters(Transformer(tiny_config(d_ff=96)))
    gated = count_parameters(Transformer(tiny_config(d_ff=64, gated_ffn=True)))
    # a layer's FFN: 32 x 128 + 128 + 64 x 32 + 32 = 6,304 against 32 x 96 + 96 + 96 x 32 + 32
    # = 6,272; four layers
    assert gated - plain == 4 * 32


@pytest.mark.parametrize("pre_norm", [True, False])
def test_residual_dropout_touches_only_the_sublayer_branch(pre_norm):
    """Dropout on the residual stream itself would scale or zero the input: with a sublayer that
    adds nothing, pre-LN gives x and post-LN gives LayerNorm(x), even in training at p = 0.5."""
    torch.manual_seed(0)
    block = Residual(16, 0.5, pre_norm).train()
    x = torch.randn(4, 7, 16)
    out = block(x, torch.zeros_like)
    expected = x if pre_norm else F.layer_norm(x, (16,), block.norm.weight, block.norm.bias)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(
    "files, given, what",
    [
        ({"config.json": '{"model_type": "marian"}'}, ".", "a Hugging Face model (marian)"),
        ({"config.json": '{"model_type": "bart"}'}, "config.json", "a Hugging Face model (bart)"),
        ({"config.json": "{}", "model.bin": ""}, ".", "a CTranslate2 model directory"),
        (  # CTranslate2 keeps no model_type; a marian one beside model.bin is still an export
            {"config.json": '{"model_type": "marian"}', "model.bin": ""},
            ".",
            "a CTranslate2 model directory",
        ),
        ({"best.pt": ""}, ".", "a directory, not a config or a checkpoint"),
        ({"config.json": "{}"}, ".", "a directory, not a config or a checkpoint"),
    ],
)
def test_info_names_other_models_and_directories_as_what_they_are(tmp_path, files, given, what):
    from translator.errors import TranslatorError

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(TranslatorError, match=what.replace("(", r"\(").replace(")", r"\)")):
        summary.describe(str(tmp_path / given), [])


def test_info_says_which_way_a_model_translates_and_its_bleu_tokenizer():
    base = str(REPO / "configs" / "base.yaml")
    text = summary.describe(base, ["data.src_lang=de", "data.tgt_lang=th"])
    assert "  translates de->th\n" in text
    chosen = summary.describe(base, ["data.tgt_lang=th", "train.valid_bleu_tokenize=char"])
    assert "  translates en->th (BLEU tokenizer char)\n" in chosen
