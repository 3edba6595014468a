"""Matplotlib figures of attention: a layer's heads side by side, and how alike a layer's heads are.

Figures are built with the object API (`matplotlib.figure.Figure`), never pyplot's global state,
so drawing needs no display and leaks no open figures; TensorBoard's `add_figure` takes them as is.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import torch
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from translator.files import atomic_write

# matplotlib on a character its font lacks: "Glyph 21278 (\N{CJK ...}) missing from font(s)"
GLYPH_MISSING = re.compile(r"Glyph (\d+) \(.+?\) missing from font")

CMAP = "viridis"
COLORBAR_INCHES = 0.8  # the heads figure's colour scale: its bar and tick labels, at the right


def panel_inches(rows: int, cols: int) -> float:
    """Side of one square panel: room for one token label per row and column, at least 2.5
    inches."""
    return max(2.5, 0.16 * max(rows, cols) + 1.2)


def grid(n_panels: int) -> tuple[int, int]:
    """(rows, columns) of a near-square grid of panels."""
    cols = math.ceil(math.sqrt(n_panels))
    return math.ceil(n_panels / cols), cols


def _draw(
    ax,
    weights: torch.Tensor,
    rows: list[str] | None,
    cols: list[str] | None,
    title: str,
    vmax: float,
) -> AxesImage:
    """One heatmap panel; token labels only where given (the grid's left column and bottom row)."""
    image = ax.imshow(
        weights.float().numpy(),
        cmap=CMAP,
        vmin=0.0,
        vmax=vmax,
        aspect="auto",
        interpolation="nearest",
    )
    ax.set_title(title, fontsize=8, pad=2)
    size = 7 if max(weights.shape) <= 40 else 5
    # a panel without labels gets no ticks at all: making tick objects is most of a figure's cost
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=size) if cols else ax.set_xticks([])
    ax.set_yticks(range(len(rows)), rows, fontsize=size) if rows else ax.set_yticks([])
    ax.tick_params(length=0, pad=1)
    return image


def heads_figure(
    weights: torch.Tensor, rows: list[str], cols: list[str], title: str, dpi: int = 150
) -> Figure:
    """One layer's weights (H, T, L) with query labels `rows` and key labels `cols` -> a figure.

    The first panel is the mean over heads, then one panel per head; all share one colour scale
    (0 to the largest weight shown), so heads can be compared. The figure is exactly `grid(H + 1)`
    panels of `panel_inches` each, plus a margin of `label_inches` for the token labels and
    COLORBAR_INCHES for the colour scale, at `dpi`.
    Labels go on the left column and the bottom row only: with a fixed layout (no tight_layout,
    which measures every label) a figure draws in a fraction of the time.
    """
    H = weights.shape[0]
    n_rows, n_cols = grid(H + 1)
    side, margin = panel_inches(len(rows), len(cols)), label_inches(rows, cols)
    width = n_cols * side + margin + COLORBAR_INCHES
    height = n_rows * side + margin + 0.4  # 0.4: the title
    fig = Figure(figsize=(width, height), dpi=dpi)
    fig.subplots_adjust(
        left=margin / width,
        right=1 - COLORBAR_INCHES / width,
        bottom=margin / height,
        top=1 - 0.6 / height,
        wspace=0.08,
        hspace=0.25,
    )
    vmax = max(float(weights.max()), 1e-6)
    panels = [("mean of heads", weights.mean(dim=0))] + [
        (f"head {h}", weights[h]) for h in range(H)
    ]
    for i, (name, panel) in enumerate(panels):
        left, bottom = i % n_cols == 0, i + n_cols >= len(panels)  # nothing drawn below it
        image = _draw(
            fig.add_subplot(n_rows, n_cols, i + 1),
            panel,
            rows if left else None,
            cols if bottom else None,
            name,
            vmax,
        )
    # the shared scale, beside the top row of panels
    bar = fig.add_axes(
        (
            1 - (COLORBAR_INCHES - 0.1) / width,
            1 - (0.6 + side) / height,
            0.12 / width,
            side / height,
        )
    )
    fig.colorbar(image, cax=bar).ax.tick_params(labelsize=7)
    bar.set_ylabel("attention weight", fontsize=7)
    fig.suptitle(f"{title}  (colour 0 to {vmax:.2f}; rows: queries, columns: keys)", fontsize=9)
    return fig


def label_inches(rows: list[str], cols: list[str]) -> float:
    """Room for the longest token label (about 0.07 inch a character at 7 points), at least half an
    inch."""
    return max(0.5, 0.07 * max(map(len, [*rows, *cols, ""])) + 0.2)


def diversity_figure(divergences: list[torch.Tensor], title: str, dpi: int = 150) -> Figure:
    """Per layer, the (H, H) mean Jensen-Shannon divergence between heads
    (0 = identical maps, 1 = disjoint)."""
    n_rows, n_cols = grid(len(divergences))
    fig = Figure(figsize=(n_cols * 3.0, n_rows * 3.0), dpi=dpi)
    for i, div in enumerate(divergences):
        ax = fig.add_subplot(n_rows, n_cols, i + 1)
        H = div.shape[0]
        image = ax.imshow(div.numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, interpolation="nearest")
        mean = float(div.sum() / (H * (H - 1))) if H > 1 else 0.0
        ax.set_title(f"layer {i}: mean {mean:.3f}", fontsize=8)
        ax.set_xticks(range(H), [str(h) for h in range(H)], fontsize=7)
        ax.set_yticks(range(H), [str(h) for h in range(H)], fontsize=7)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("head", fontsize=7)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    fig.suptitle(f"{title}: head divergence (Jensen-Shannon, bits)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def save_png(fig: Figure, path: str | Path) -> set[str]:
    """Write `fig` as a PNG, atomically; returns the label characters no installed font could
    draw (CJK with matplotlib's own DejaVu: boxes), which matplotlib warns about two lines a
    character, so that the caller can say it once."""
    with atomic_write(path, "wb") as handle, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(handle, format="png")
    missing = set()
    for w in caught:
        if found := GLYPH_MISSING.search(str(w.message)):
            missing.add(chr(int(found[1])))
        else:  # anything else, as it came
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return missing


def tiles_image(
    panels: list[torch.Tensor], vmax: float | None = None, cell_px: int = 4, gap_px: int = 2
) -> torch.Tensor:
    """Heatmaps (T, L) side by side as one RGB image (3, height, width) uint8, without labels.

    The cheap view for training: a labelled figure costs about a second to draw, this a few
    milliseconds. One colour scale (0 to `vmax`, default the largest weight); each weight is a
    `cell_px` square; panels are `gap_px` white pixels apart.
    """
    import matplotlib

    vmax = vmax or max(max(float(p.max()) for p in panels), 1e-6)
    T, L = max(p.shape[0] for p in panels), max(p.shape[1] for p in panels)
    canvas = torch.ones(T * cell_px, len(panels) * (L * cell_px + gap_px) - gap_px, 3)
    colours = matplotlib.colormaps[CMAP]
    for i, panel in enumerate(panels):
        # (T, L, 3)
        rgb = torch.from_numpy(colours((panel.float() / vmax).clamp(0, 1).numpy())[..., :3]).float()
        rgb = rgb.repeat_interleave(cell_px, 0).repeat_interleave(cell_px, 1)
        left = i * (L * cell_px + gap_px)
        canvas[: rgb.shape[0], left : left + rgb.shape[1]] = rgb
    return (canvas * 255).round().to(torch.uint8).permute(2, 0, 1)  # (3, H, W)
