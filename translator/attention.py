"""`translator attention`: look at a model's attention for a few sentences.

Per sentence, the translation is the given one (`--target`, forced decoding) or the model's own
search output; one teacher-forced pass then gives every layer's encoder self-, decoder self- and
cross-attention. Out come a table of per-head entropy with flags (near-uniform, near-one-hot,
near-duplicate heads), PNG heatmaps (one figure per sentence, kind and layer: the mean of heads,
then every head; and per kind the heads' pairwise divergence) and a self-contained HTML page.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from translator.config import DecodeConfig, DiagnosticsConfig
from translator.data.tokenizer import Tokenizer
from translator.decode import in_eval_mode
from translator.decode.search import search
from translator.diagnostics.capture import Forced, forced_attention
from translator.diagnostics.figures import diversity_figure, heads_figure, save_png
from translator.diagnostics.html import sentence_data, write_page
from translator.diagnostics.stats import LayerStats, allowed_keys, layer_stats
from translator.diagnostics.words import merge_words, word_labels
from translator.errors import TranslatorError, counted
from translator.files import atomic_write
from translator.model.transformer import Transformer

KIND_NAMES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}
ADVICE = {  # the seed articles' reading of each flag, and what to try
    "near-uniform": "attends to nothing in particular: Q and K have learned no matching (early in "
    "training that is normal; later, check the Q/K initialisation and the learning rate)",
    "near-one-hot": "a saturated softmax, whose gradients vanish (check the 1/sqrt(d_k) scaling "
    "and Q/K initialisation scales; a sharp head can also be a legitimate positional head)",
    "near-duplicate": "heads that attend alike add no view of their own (raise dropout or revisit "
    "the initialisation; read the heads together before removing any)",
}


@dataclass
class Pieces:
    """One sentence's labels: source pieces + </s>, decoder inputs <s> + target, outputs target +
    </s>."""

    src: list[str]
    dec_in: list[str]
    dec_out: list[str]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of a kind's map."""
        return {
            "encoder": (self.src, self.src),
            "decoder": (self.dec_out, self.dec_in),
            "cross": (self.dec_out, self.src),
        }[kind]


@in_eval_mode
def run(
    model: Transformer,
    tokenizer: Tokenizer,
    diagnostics: DiagnosticsConfig,
    decode: DecodeConfig,
    sources: list[str],
    targets: list[str] | None = None,
    out_dir: str | Path | None = None,
    html: str | Path | None = None,
    words: bool = False,
    langs: tuple[str, str] = ("", ""),
    tsv: str | Path | None = None,
) -> str:
    """Attention of `sources` (with `targets`, else searched translations) -> the stats table;
    figures, page and TSV written where asked. `langs`: source and target language codes, for the
    page's screen readers."""
    out_dir, html, tsv = (None if p is None else Path(p) for p in (out_dir, html, tsv))
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise TranslatorError("is a file, not a directory", str(out_dir), "give -o a directory")
    src_ids, tgt_ids = token_ids(model, tokenizer, decode, sources, targets)
    forced = forced_attention(model, src_ids, tgt_ids)
    labels = [
        Pieces(
            tokenizer.sp.id_to_piece(s) + ["</s>"],
            ["<s>"] + tokenizer.target_sp.id_to_piece(t),
            tokenizer.target_sp.id_to_piece(t) + ["</s>"],
        )
        for s, t in zip(src_ids, tgt_ids)
    ]
    stats = {
        kind: [
            layer_stats(w, allowed_keys(kind, forced.src_valid, forced.tgt_valid)[0], diagnostics)
            for w in forced.maps[kind]
        ]
        for kind in forced.maps
    }
    views = [sentence_maps(forced, b, labels[b], words) for b in range(len(sources))]
    if out_dir is not None:
        missing = write_figures(out_dir, views)
        for kind in forced.maps:  # over all the sentences: which heads attend alike
            save_png(
                diversity_figure([st.divergence for st in stats[kind]], KIND_NAMES[kind]),
                out_dir / f"diversity-{kind}.png",
            )
        if missing:
            shown = ", ".join(sorted(missing)[:5]) + (" ..." if len(missing) > 5 else "")
            print(
                f"warning: {out_dir}: no installed font draws {len(missing)} characters of the "
                f"labels ({shown}): boxes in the figures (install one that has them, e.g. Noto "
                "Sans CJK; the HTML page shows them)",
                file=sys.stderr,
            )
    if tsv is not None:
        write_weights(tsv, views)
    if html is not None:
        write_page(
            html,
            "attention: " + sources[0][:60],
            [
                sentence_data({"src": p.src, "in": p.dec_in, "out": p.dec_out}, maps)
                for p, maps in views
            ],
            langs,
        )
    translations = tokenizer.decode(tgt_ids)
    header = "\n".join(
        f"{i}: {src}\n   -> {tgt}" for i, (src, tgt) in enumerate(zip(sources, translations))
    )
    missing = "".join(f"\n{why}" for why in forced.without_weights.values())
    return header + "\n\n" + format_table(stats) + missing


def token_ids(
    model: Transformer,
    tokenizer: Tokenizer,
    decode: DecodeConfig,
    sources: list[str],
    targets: list[str] | None,
) -> tuple[list[list[int]], list[list[int]]]:
    """Source ids and target ids (given, or the search's best), checked against the model's
    positions."""
    sources = [s.strip() for s in sources]
    if not sources or not all(sources):
        raise TranslatorError(
            "no source sentence (or an empty one)",
            "attention",
            "give sentences as arguments or on stdin, one a line",
        )
    if targets is not None and not all(t.strip() for t in targets):
        raise TranslatorError(
            "an empty --target", "--target", "give the translation to force-decode, or leave it out"
        )
    if targets is not None and len(targets) != len(sources):
        raise TranslatorError(
            f"--target given {counted(len(targets), 'time')} for "
            f"{counted(len(sources), 'sentence')}",
            "--target",
            "give one --target per source sentence, in order",
        )
    src_ids = tokenizer.encode(sources)
    limit = model.cfg.max_positions - 1  # with EOS (source) or BOS (target) they fill the positions
    if targets is None:
        tgt_ids = [h[0].tokens for h in search(model, _fit(src_ids, limit, "sentence"), decode)]
    else:
        tgt_ids = tokenizer.target_sp.encode([t.strip() for t in targets])
    return src_ids, _fit(tgt_ids, limit, "--target")


def _fit(ids: list[list[int]], limit: int, where: str) -> list[list[int]]:
    for number, seq in enumerate(ids):  # from 0, as the printed list and the file names
        if len(seq) > limit:
            raise TranslatorError(
                f"sentence {number} has {len(seq)} tokens, more than the model's {limit}",
                where,
                "give shorter sentences",
            )
    return ids


def sentence_maps(
    forced: Forced, b: int, pieces: Pieces, words: bool
) -> tuple[Pieces, dict[str, list[torch.Tensor]]]:
    """Sentence b's maps per kind and layer (H, rows, cols), cut to its real tokens, and their
    labels.

    With `words`, pieces are merged into words (a key word sums its pieces, a query word averages
    them).
    """
    maps = {}
    for kind in forced.maps:
        rows, cols = pieces.axes(kind)
        maps[kind] = [w[b, :, : len(rows), : len(cols)] for w in forced.maps[kind]]
        if words:
            maps[kind] = [merge_words(w, rows, cols) for w in maps[kind]]
    if words:
        pieces = Pieces(
            word_labels(pieces.src), word_labels(pieces.dec_in), word_labels(pieces.dec_out)
        )
    return pieces, maps


def write_figures(
    out_dir: Path, views: list[tuple[Pieces, dict[str, list[torch.Tensor]]]]
) -> set[str]:
    """`sentence{i}-{kind}-layer{l}.png` for every sentence, kind and layer; returns the label
    characters no installed font draws."""
    missing = set()
    for i, (pieces, maps) in enumerate(views):
        for kind, layers in maps.items():
            rows, cols = pieces.axes(kind)
            for layer, weights in enumerate(layers):
                title = f"sentence {i}, {KIND_NAMES[kind]}, layer {layer}"
                missing |= save_png(
                    heads_figure(weights, rows, cols, title),
                    out_dir / f"sentence{i}-{kind}-layer{layer}.png",
                )
    return missing


def write_weights(path: Path, views: list[tuple[Pieces, dict[str, list[torch.Tensor]]]]) -> None:
    """Every weight as a row of a TSV (long format, one header line, as pandas reads it):
    sentence, kind, layer, head, query index and token, key index and token, weight."""
    columns = ["sentence", "kind", "layer", "head", "query_index", "query", "key_index", "key"]
    with atomic_write(path) as handle:
        table = csv.writer(handle, delimiter="\t", lineterminator="\n")
        table.writerow([*columns, "weight"])
        for i, (pieces, maps) in enumerate(views):
            for kind, layers in maps.items():
                queries, keys = pieces.axes(kind)
                for layer, weights in enumerate(layers):
                    for head, head_weights in enumerate(weights.float().tolist()):
                        for t, row in enumerate(head_weights):
                            table.writerows(
                                [i, kind, layer, head, t, queries[t], k, keys[k], f"{v:.4f}"]
                                for k, v in enumerate(row)
                            )


def format_table(stats: dict[str, list[LayerStats]]) -> str:
    """Per kind, layer and head: mean entropy (nats and normalised) and flags; per layer: diversity,
    duplicates."""
    lines = ["kind     layer  head  entropy  normalised  flag"]
    seen: set[str] = set()
    for kind, layers in stats.items():
        for layer, st in enumerate(layers):
            for h, (ent, norm) in enumerate(zip(st.entropy, st.normalised)):
                flag = (
                    "near-uniform" if h in st.uniform else "near-one-hot" if h in st.one_hot else ""
                )
                seen.add(flag)
                lines.append(
                    f"{kind:<8} {layer:>5}  {h:>4}  {ent:>7.3f}  {norm:>10.3f}  {flag}".rstrip()
                )
            dups = "; near-duplicate heads: " + ", ".join(
                "=".join(map(str, g)) for g in st.duplicates
            )
            lines.append(
                f"{kind:<8} {layer:>5}   all  head diversity {st.diversity:.3f} (mean "
                f"Jensen-Shannon, bits){dups if st.duplicates else ''}"
            )
            seen.add("near-duplicate" if st.duplicates else "")
    notes = [f"{flag}: {ADVICE[flag]}" for flag in ADVICE if flag in seen]
    legend = (
        "entropy: mean over query rows, nats; normalised: divided by log(number of keys), "
        "0 = one-hot, 1 = uniform"
    )
    return "\n".join([*lines, "", legend, *notes])
