"""One self-contained HTML page to explore attention: pick sentence, kind, layer and head (or all
heads).

Everything is inline (styles, script, data): the page makes no request at all, so it opens
offline from a file. The heads can be read one at a time, as their mean, or all side by side
(BertViz's head view idea: "read the heads together"); hovering a token or a cell (or moving
to a cell with the keyboard) highlights its row and column in every panel shown. Each map is a
table whose cells hold their weights as text, for screen readers.
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


def write_page(
    path: str | Path, title: str, sentences: list[dict], langs: tuple[str, str] = ("", "")
) -> None:
    """Write the page for `sentences` (from `sentence_data`) to `path`, atomically. `langs`: the
    source and target language codes, so that a screen reader reads each token in its language."""
    src, tgt = langs
    data = json.dumps(
        {
            "title": title,
            "axes": AXES,
            "langs": {"src": src, "in": tgt, "out": tgt},
            "sentences": sentences,
        },
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
h1 { font-size: 16px; margin: 0 0 8px 0; }
#controls label { margin-right: 14px; }
#panels { display: flex; flex-wrap: wrap; gap: 18px; margin-top: 12px; }
.panel h2 { font-size: 12px; margin: 0 0 4px 0; font-weight: 600; }
table.map { border-collapse: collapse; }
.map th, .map td { padding: 0; font-weight: normal; }
/* the colours are the data: kept in forced-colours (high contrast) modes */
.cell { width: 16px; min-width: 16px; height: 16px; box-sizing: border-box;
  forced-color-adjust: none; }
/* a white ring inside a black one: visible on every colour of the map */
.cell.hl { outline: 2px solid #fff; outline-offset: -2px; box-shadow: inset 0 0 0 3px #000; }
.cell:focus { outline: 3px solid #000; outline-offset: 0; position: relative; z-index: 1; }
.v { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%);
  white-space: nowrap; }
.rowlab, .collab { font-size: 11px; white-space: nowrap; cursor: default; padding: 0 3px; }
.rowlab { text-align: right; line-height: 16px; }
/* sideways: Chinese, Japanese and emoji labels turn with the Latin ones (vertical-rl alone keeps
   them upright, and the rotation then draws them upside down) */
.collab { writing-mode: vertical-rl; text-orientation: sideways; transform: rotate(180deg);
  text-align: left; }
.rowlab.hl, .collab.hl { background: #ffe08a; font-weight: 700; }
#note { color: #555; margin: 6px 0; }
#readout { min-height: 1.4em; margin: 6px 0; font-variant-numeric: tabular-nums; }
</style></head>
<body>
<h1 id="title">__TITLE__</h1>
<div id="controls">
<label>sentence <select id="sentence"></select></label>
<label>attention <select id="kind"><option value="encoder">encoder self-attention</option>
<option value="decoder">decoder self-attention</option>
<option value="cross">cross-attention</option></select></label>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
</div>
<p id="note">Rows are queries, columns are keys; a row sums to 1. Hover a token or a cell, or Tab
to a map and move with the arrow keys, to highlight its row and column and read the weight below.
Decoder rows are named after the token each position predicts. Colours run from dark purple (0)
to yellow (the largest weight shown, as the line below says).</p>
<p id="status" aria-live="polite"></p>
<p id="readout"></p>
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
// a token as a header: SentencePiece's word-start mark is drawn but not read out; isolated, so
// that a right-to-left token (Arabic, Hebrew) draws the mark at its start, on its right
function label(th, text, lang) {
  const token = document.createElement("bdi");
  if (text.startsWith("\u2581")) {
    const mark = document.createElement("span");
    mark.setAttribute("aria-hidden", "true"); mark.textContent = "\u2581"; token.appendChild(mark);
    text = text.slice(1);
  }
  token.appendChild(document.createTextNode(text));
  th.appendChild(token);
  if (lang) th.lang = lang;
}
// one map as a table: token headers, and each weight as the cell's (visually hidden) text
function panel(title, weights, rows, cols, vmax, langs) {
  const div = document.createElement("div"), table = document.createElement("table");
  div.className = "panel";
  div.appendChild(document.createElement("h2")).textContent = title;
  table.className = "map";
  const top = table.createTHead().insertRow();
  top.appendChild(document.createElement("td"));
  cols.forEach((c, l) => {
    const th = top.appendChild(document.createElement("th"));
    th.scope = "col"; th.className = "collab"; th.dataset.col = l; label(th, c, langs[1]);
  });
  const body = table.createTBody();
  weights.forEach((row, t) => {
    const tr = body.insertRow(), th = tr.appendChild(document.createElement("th"));
    th.scope = "row"; th.className = "rowlab"; th.dataset.row = t; label(th, rows[t], langs[0]);
    row.forEach((v, l) => {
      const c = tr.insertCell();
      c.className = "cell"; c.dataset.row = t; c.dataset.col = l;
      c.tabIndex = t === 0 && l === 0 ? 0 : -1;  // one Tab stop a map; arrow keys move in it
      c.style.background = colour(v / vmax);
      c.title = rows[t] + " \u2192 " + cols[l] + ": " + v.toFixed(3);
      c.appendChild(document.createElement("span")).className = "v";
      c.lastChild.textContent = v.toFixed(3);
    });
  });
  div.appendChild(table);
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
// a cell's weight in words, for the eye (a screen reader reads the cell and its headers)
function readout(cell) {
  const table = cell.closest("table"), head = cell.closest(".panel").firstChild.textContent;
  const row = table.querySelector('th[data-row="' + cell.dataset.row + '"]').textContent;
  const col = table.querySelector('th[data-col="' + cell.dataset.col + '"]').textContent;
  $("readout").textContent = head + ": " + row + " \u2192 " + col + ": " + cell.textContent;
}
function draw() {
  const s = DATA.sentences[+$("sentence").value], kind = $("kind").value, layers = s.maps[kind];
  const kindName = $("kind").selectedOptions[0].textContent;
  $("readout").textContent = "";
  if (!layers) {  // linear attention (model.attention=linear) forms no weights
    $("panels").textContent =
      "No weights to show: this model's " + kind + " self-attention is linear.";
    $("status").textContent = kindName + ": no weights to show (linear attention).";
    $("panels").dataset.drawn = kind;
    return;
  }
  fill($("layer"), layers.map((_, i) => i), layers.map((_, i) => String(i)));
  const H = layers[0].length;
  const headIds = Array.from({length: H}, (_, h) => h);
  const headNames = headIds.map((h) => "head " + h);
  fill($("head"), ["all", "mean", ...headIds], ["all heads", "mean of heads", ...headNames]);
  const [rowAxis, colAxis] = DATA.axes[kind], rows = s.labels[rowAxis], cols = s.labels[colAxis];
  const langs = [DATA.langs[rowAxis], DATA.langs[colAxis]];
  const maps = heads(layers[+$("layer").value]), pick = $("head").value;
  const shown = pick === "all" ? ["mean", ...Array.from({length: H}, (_, h) => h)] : [pick];
  const vmax = Math.max(1e-6, ...shown.flatMap((k) => maps[k].flat()));
  const box = $("panels");
  box.innerHTML = "";
  shown.forEach((k) => {
    const title = k === "mean" ? "mean of heads" : "head " + k;
    box.appendChild(panel(title, maps[k], rows, cols, vmax, langs));
  });
  $("status").textContent = kindName + ", layer " + $("layer").value + ", " +
    $("head").selectedOptions[0].textContent + ": colours from 0 (dark purple) to " +
    vmax.toFixed(3) + " (yellow).";
  box.dataset.drawn = kind + "/" + $("layer").value + "/" + pick;
}
// self-attention: row i and column i are one token
function point(t) {
  const self = $("kind").value !== "cross";
  if (!t) return;
  if (t.classList.contains("cell")) { highlight(+t.dataset.row, +t.dataset.col); readout(t); }
  else if (t.classList.contains("rowlab")) highlight(+t.dataset.row, self ? +t.dataset.row : null);
  else if (t.classList.contains("collab")) highlight(self ? +t.dataset.col : null, +t.dataset.col);
}
$("panels").addEventListener("mouseover", (e) => {
  point(e.target.closest(".cell, .rowlab, .collab"));
});
$("panels").addEventListener("mouseleave", () => highlight(null, null));
$("panels").addEventListener("focusin", (e) => point(e.target.closest(".cell")));
$("panels").addEventListener("keydown", (e) => {
  const t = e.target.closest(".cell");
  const step = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]}[e.key];
  if (!t || !step) return;
  e.preventDefault();
  const next = t.closest("table").querySelector('.cell[data-row="' + (+t.dataset.row + step[0]) +
    '"][data-col="' + (+t.dataset.col + step[1]) + '"]');
  if (next) { t.tabIndex = -1; next.tabIndex = 0; next.focus(); }
});
fill($("sentence"), DATA.sentences.map((_, i) => i), DATA.sentences.map((s, i) => {
  // the source's text: pieces joined as SentencePiece does (no space inside a word, or anywhere
  // in Chinese), without the end of sentence
  const text = s.labels.src.filter((p) => p !== "</s>").join("").replace(/\u2581/g, " ");
  return i + ": " + text.trim().slice(0, 60);
}));
["sentence", "kind", "layer", "head"].forEach((id) => $(id).addEventListener("change", draw));
$("kind").value = "cross";
draw();
"""
