"""One self-contained HTML page to explore attention: pick sentence, kind, layer and head (or all
heads).

Everything is inline (styles, script, data): the page makes no request at all, so it opens
offline from a file. The heads can be read one at a time, as their mean, or all side by side
(BertViz's head view idea: "read the heads together"); hovering a token or a cell highlights its
row and column in every panel shown.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from translator.files import atomic_write

# Which labels run along each kind's rows (queries) and columns (keys).
AXES = {"encoder": ("src", "src"), "decoder": ("out", "in"), "cross": ("out", "src")}


def sentence_data(labels: dict[str, list[str]], maps: dict[str, list[torch.Tensor]]) -> dict:
    """One sentence for the page: `labels` src / in / out (source, decoder inputs, decoder outputs)
    and its maps kind -> per layer (H, T, L), stored as integers in thousandths (a third of the
    JSON)."""
    return {
        "labels": labels,
        "maps": {
            kind: [(w.float() * 1000).round().int().tolist() for w in layers]
            for kind, layers in maps.items()
        },
    }


def write_page(path: str | Path, title: str, sentences: list[dict]) -> None:
    """Write the page for `sentences` (from `sentence_data`) to `path`, atomically."""
    data = json.dumps(
        {"title": title, "axes": AXES, "sentences": sentences},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    # "<" only occurs inside JSON strings, where \u003c means the same: no token (such as "</s>")
    # can end the script element or open a comment in it
    data = data.replace("<", "\\u003c")
    page = (
        PAGE.replace("__TITLE__", _escape(title))
        .replace("__DATA__", data)
        .replace("__SCRIPT__", SCRIPT)
    )
    with atomic_write(path) as handle:
        handle.write(page)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
  content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>__TITLE__</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 12px; color: #222; }
#controls label { margin-right: 14px; }
#panels { display: flex; flex-wrap: wrap; gap: 18px; margin-top: 12px; }
.panel h3 { font-size: 12px; margin: 0 0 4px 0; font-weight: 600; }
.map { display: grid; gap: 0; }
.cell { width: 16px; height: 16px; box-sizing: border-box; }
.cell.hl { outline: 1px solid #e4002b; outline-offset: -1px; }
.rowlab, .collab { font-size: 11px; white-space: nowrap; cursor: default; padding: 0 3px; }
.rowlab { text-align: right; line-height: 16px; }
.collab { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }
.rowlab.hl, .collab.hl { background: #ffe08a; font-weight: 700; }
#note { color: #555; margin-top: 6px; }
</style></head>
<body>
<h2 id="title">__TITLE__</h2>
<div id="controls">
<label>sentence <select id="sentence"></select></label>
<label>attention <select id="kind"><option value="encoder">encoder self-attention</option>
<option value="decoder">decoder self-attention</option>
<option value="cross">cross-attention</option></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
</div>
<div id="note">Rows are queries, columns are keys; a row sums to 1. Hover a token or a cell to
highlight its row and column. Decoder rows are named after the token each position predicts.</div>
<div id="panels"></div>
<script id="data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script>
</body></html>
"""

SCRIPT = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
// viridis at 9 stops, interpolated linearly
const VIRIDIS = [[68,1,84],[71,44,122],[59,81,139],[44,113,142],[33,144,141],[39,173,129],
  [92,200,99],[170,220,50],[253,231,37]];
function colour(v) {
  const x = Math.min(Math.max(v, 0), 1) * (VIRIDIS.length - 1);
  const i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + f * (VIRIDIS[i + 1][k] - a)));
  return "rgb(" + c.join(",") + ")";
}
function fill(select, values, labels) {
  const old = select.value;
  select.innerHTML = "";
  values.forEach((v, i) => {
    const o = document.createElement("option");
    o.value = v; o.textContent = labels[i]; select.appendChild(o);
  });
  if (values.map(String).includes(old)) select.value = old;
}
// (H, T, L) integers in thousandths -> {"mean": ..., 0: ..., ...} as fractions
function heads(maps) {
  const H = maps.length;
  const sum = (t, l) => maps.reduce((s, m) => s + m[t][l], 0);
  const mean = maps[0].map((row, t) => row.map((_, l) => sum(t, l) / H / 1000));
  const out = {mean: mean};
  maps.forEach((m, h) => { out[h] = m.map((row) => row.map((v) => v / 1000)); });
  return out;
}
function panel(title, weights, rows, cols, vmax) {
  const div = document.createElement("div"), grid = document.createElement("div");
  div.className = "panel";
  div.innerHTML = "<h3></h3>";
  div.firstChild.textContent = title;
  grid.className = "map";
  grid.style.gridTemplateColumns = "auto repeat(" + cols.length + ", 16px)";
  grid.appendChild(document.createElement("span"));
  cols.forEach((c, l) => {
    const s = document.createElement("span");
    s.className = "collab"; s.textContent = c; s.dataset.col = l; grid.appendChild(s);
  });
  weights.forEach((row, t) => {
    const lab = document.createElement("span");
    lab.className = "rowlab"; lab.textContent = rows[t]; lab.dataset.row = t; grid.appendChild(lab);
    row.forEach((v, l) => {
      const c = document.createElement("div");
      c.className = "cell"; c.dataset.row = t; c.dataset.col = l;
      c.style.background = colour(v / vmax);
      c.title = rows[t] + " \u2192 " + cols[l] + ": " + v.toFixed(3);
      grid.appendChild(c);
    });
  });
  div.appendChild(grid);
  return div;
}
function highlight(row, col) {
  document.querySelectorAll(".hl").forEach((e) => e.classList.remove("hl"));
  if (row === null && col === null) return;
  document.querySelectorAll("#panels [data-row], #panels [data-col]").forEach((e) => {
    const r = e.dataset.row, c = e.dataset.col;
    const cell = e.classList.contains("cell");
    const inRow = row !== null && r === String(row) && (c === undefined || cell);
    const inCol = col !== null && c === String(col) && (r === undefined || cell);
    if (inRow || inCol) e.classList.add("hl");
  });
}
function draw() {
  const s = DATA.sentences[+$("sentence").value], kind = $("kind").value, layers = s.maps[kind];
  if (!layers) {  // linear attention (model.attention=linear) forms no weights
    $("panels").textContent =
      "No weights to show: this model's " + kind + " self-attention is linear.";
    $("panels").dataset.drawn = kind;
    return;
  }
  fill($("layer"), layers.map((_, i) => i), layers.map((_, i) => String(i)));
  const H = layers[0].length;
  const headIds = Array.from({length: H}, (_, h) => h);
  const headNames = headIds.map((h) => "head " + h);
  fill($("head"), ["all", "mean", ...headIds], ["all heads", "mean of heads", ...headNames]);
  const [rowAxis, colAxis] = DATA.axes[kind], rows = s.labels[rowAxis], cols = s.labels[colAxis];
  const maps = heads(layers[+$("layer").value]), pick = $("head").value;
  const shown = pick === "all" ? ["mean", ...Array.from({length: H}, (_, h) => h)] : [pick];
  const vmax = Math.max(1e-6, ...shown.flatMap((k) => maps[k].flat()));
  const box = $("panels");
  box.innerHTML = "";
  shown.forEach((k) => {
    box.appendChild(panel(k === "mean" ? "mean of heads" : "head " + k, maps[k], rows, cols, vmax));
  });
  box.dataset.drawn = kind + "/" + $("layer").value + "/" + pick;
}
$("panels").addEventListener("mouseover", (e) => {
  // self-attention: row i and column i are one token
  const t = e.target, self = $("kind").value !== "cross";
  if (t.classList.contains("cell")) highlight(+t.dataset.row, +t.dataset.col);
  else if (t.classList.contains("rowlab")) highlight(+t.dataset.row, self ? +t.dataset.row : null);
  else if (t.classList.contains("collab")) highlight(self ? +t.dataset.col : null, +t.dataset.col);
});
$("panels").addEventListener("mouseleave", () => highlight(null, null));
fill($("sentence"), DATA.sentences.map((_, i) => i), DATA.sentences.map((s, i) => {
  return i + ": " + s.labels.src.join(" ").replace(/\u2581/g, "").slice(0, 60);
}));
["sentence", "kind", "layer", "head"].forEach((id) => $(id).addEventListener("change", draw));
$("kind").value = "cross";
draw();
"""
