"""Figures decode as PNGs of the size their layout rule gives, with the heads drawn in them."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from translator.diagnostics.figures import (
    COLORBAR_INCHES,
    diversity_figure,
    heads_figure,
    save_png,
    tiles_image,
)


def test_heads_png_has_the_expected_size_and_content(tmp_path):
    weights = torch.softmax(torch.randn(3, 5, 6) * 3, dim=-1)  # 3 heads + the mean: a 2 x 2 grid
    rows, cols = [f"q{i}" for i in range(5)], [f"key{i}" for i in range(6)]
    fig = heads_figure(weights, rows, cols, "test", dpi=50)
    save_png(fig, tmp_path / "heads.png")
    image = Image.open(tmp_path / "heads.png")
    image.load()
    # panels 2.5 in (few tokens), label margin 0.07 * 4 chars + 0.2 = 0.5 in (the minimum), the
    # colour bar's strip, title 0.4 in
    assert image.format == "PNG" and image.size == (
        int((2 * 2.5 + 0.5 + COLORBAR_INCHES) * 50),
        int((2 * 2.5 + 0.5 + 0.4) * 50),
    )
    # one colour bar after the 4 panels, its scale the panels' (0 to the largest weight)
    assert len(fig.axes) == 5
    assert fig.axes[-1].get_ylim() == pytest.approx((0.0, float(weights.max())))
    colours = {
        image.convert("RGB").getpixel((x, y))
        for x in range(0, image.size[0], 5)
        for y in range(0, image.size[1], 5)
    }
    assert len(colours) > 20  # heatmaps, not a blank page


def test_long_sentences_get_bigger_panels(tmp_path):
    weights = torch.softmax(torch.randn(1, 30, 30), dim=-1)  # 1 head + the mean: 1 x 2
    labels = [f"tokenlabel{i:02d}" for i in range(30)]  # 12 characters
    fig = heads_figure(weights, labels, labels, "long", dpi=40)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    side, margin = 0.16 * 30 + 1.2, 0.07 * 12 + 0.2
    # matplotlib truncates to whole pixels
    assert Image.open(buffer).size == (
        int((2 * side + margin + COLORBAR_INCHES) * 40),
        int((side + margin + 0.4) * 40),
    )


def test_diversity_figure_has_a_panel_per_layer(tmp_path):
    fig = diversity_figure([torch.rand(4, 4) for _ in range(3)], "cross", dpi=40)
    save_png(fig, tmp_path / "d.png")
    # 3 layers: a 2 x 2 grid of 3 in
    assert Image.open(tmp_path / "d.png").size == (2 * 3 * 40, 2 * 3 * 40)
    # each layer's panel has its colour bar, from 0 (identical heads) to 1 bit (disjoint)
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(fig.axes) == 6 and len(bars) == 3
    assert all(bar.get_ylim() == (0.0, 1.0) for bar in bars)


def test_tiles_image_puts_panels_side_by_side_on_one_scale():
    a = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    b = torch.tensor([[0.0, 1.0, 0.0]])  # a smaller panel: padded with white
    image = tiles_image([a, b], cell_px=3, gap_px=2)
    # every panel gets the largest panel's slot (3 x 3 cells of 3 pixels), slots 2 pixels apart
    assert image.dtype == torch.uint8 and tuple(image.shape) == (3, 2 * 3, 2 * (3 * 3 + 2) - 2)
    pixel = lambda y, x: tuple(image[:, y, x].tolist())  # noqa: E731
    assert pixel(0, 0) == (253, 231, 37)  # weight 1: viridis' top
    assert pixel(0, 3) == (68, 1, 84)  # weight 0: viridis' bottom
    # a's slot beyond a, the gap
    assert pixel(0, 6) == (255, 255, 255) and pixel(0, 10) == (255, 255, 255)
    # b's 1, and below b
    assert pixel(0, 11 + 3) == (253, 231, 37) and pixel(4, 11) == (255, 255, 255)


def test_labels_no_font_draws_are_returned_once_not_warned_per_character(tmp_path):
    import warnings

    weights = torch.softmax(torch.randn(2, 3, 3), dim=-1)
    lacking = ["\ue000", "\ue001", "a"]  # private-use characters: in no font matplotlib ships
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's per-glyph UserWarning would raise here
        missing = save_png(heads_figure(weights, lacking, lacking, "t", dpi=30), tmp_path / "a.png")
        plain = save_png(
            heads_figure(weights, ["a"] * 3, ["b"] * 3, "t", dpi=30), tmp_path / "b.png"
        )
    assert missing == {"\ue000", "\ue001"} and plain == set()
