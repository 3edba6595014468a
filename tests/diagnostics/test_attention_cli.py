"""`translator attention` and `translate --alignments` end to end on the copy model's checkpoint."""

from __future__ import annotations

import re

import pytest
from PIL import Image

from tests.test_cli import run_cli
from translator import attention
from translator.errors import TranslatorError


def test_attention_writes_table_figures_and_page(copy_model, tmp_path):
    out, html = tmp_path / "figures", tmp_path / "page.html"
    result = run_cli(
        "attention",
        str(copy_model.path),
        "ka lo mi",
        "nu pe",
        "-o",
        str(out),
        "--html",
        str(html),
        "--device",
        "cpu",
    )
    assert result.returncode == 0, result.stderr
    assert "0: ka lo mi\n   -> ka lo mi" in result.stdout  # the model's own (copied) translation
    rows = re.findall(
        r"^(encoder|decoder|cross) +(\d+) +(\d+) +([\d.]+) +([\d.]+)", result.stdout, re.M
    )
    assert len(rows) == 3 * 4  # three kinds, one layer each, four heads
    assert all(0 <= float(norm) <= 1 for *_, norm in rows)
    assert len(re.findall(r"head diversity [\d.]+", result.stdout)) == 3
    names = sorted(p.name for p in out.iterdir())
    kinds = ("cross", "decoder", "encoder")
    assert names == sorted(
        [f"sentence{i}-{k}-layer0.png" for i in range(2) for k in kinds]
        + [f"diversity-{k}.png" for k in kinds]
    )
    assert Image.open(out / "sentence0-cross-layer0.png").format == "PNG"
    page = html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '"\u2581nu","\u2581pe"' in page


def test_attention_tsv_holds_every_weight_as_text(copy_model, tmp_path):
    """One row per weight: each query's row sums to 1, the decoder sees no later key, and the
    tokens are the sentence's pieces."""
    import csv
    from collections import defaultdict

    tsv = tmp_path / "weights.tsv"
    result = run_cli("attention", str(copy_model.path), "ka lo mi", "nu pe", "--tsv", str(tsv))
    assert result.returncode == 0, result.stderr
    with tsv.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    sums, queries = defaultdict(float), defaultdict(dict)
    for r in rows:
        sums[r["sentence"], r["kind"], r["layer"], r["head"], r["query_index"]] += float(
            r["weight"]
        )
        queries[r["sentence"], r["kind"]][int(r["query_index"])] = r["query"]
        if r["kind"] == "decoder" and int(r["key_index"]) > int(r["query_index"]):
            assert float(r["weight"]) == 0.0
    assert all(abs(total - 1) < 0.003 for total in sums.values())
    # every query with every key, once: "ka lo mi" is 6 pieces with </s> (this vocabulary splits
    # "mi"), "nu pe" 3; 3 kinds; 4 heads
    assert len(rows) == 4 * (3 * 6 * 6 + 3 * 3 * 3) == len({tuple(r.values())[:8] for r in rows})
    encoder = queries["1", "encoder"]
    assert [encoder[i] for i in sorted(encoder)] == ["\u2581nu", "\u2581pe", "</s>"]


def test_attention_forced_target_and_words_from_stdin(copy_model, tmp_path):
    result = run_cli(
        "attention",
        str(copy_model.path),
        "--target",
        "mi mi ka",
        "--words",
        "-o",
        str(tmp_path),
        stdin="ka lo mi\n",
    )
    assert result.returncode == 0, result.stderr
    assert "-> mi mi ka" in result.stdout


def test_attention_reads_stdin_lines_ending_at_newline_alone(copy_model):
    # CRLF ends a line; U+2028 inside a line does not (translate reads lines the same way)
    result = run_cli("attention", str(copy_model.path), stdin="ka lo mi\r\n\nmi\u2028ka lo\n")
    assert result.returncode == 0, result.stderr
    assert "0: ka lo mi\n" in result.stdout and "1: mi\u2028ka lo\n" in result.stdout
    assert "2: " not in result.stdout


def test_attention_bad_input_is_a_user_error(copy_model):
    for sources, targets, message in [
        (["ka", "lo"], ["ka"], "--target given 1 time for 2 sentences"),
        (["ka", "  "], None, "no source sentence"),
        (["ka"], [" "], "an empty --target"),
        # numbered from 0, as the printed list and the PNG file names
        (["ka", "ka " * 40], None, "sentence 1 has 40 tokens, more than the model's 31"),
        (["ka " * 40], None, "sentence 0 has 40 tokens, more than the model's 31"),
    ]:
        with pytest.raises(TranslatorError, match=message):
            attention.run(
                copy_model.model,
                copy_model.tokenizer,
                copy_model.cfg.diagnostics,
                copy_model.cfg.decode,
                sources,
                targets,
            )


def test_attention_out_dir_that_is_a_file_is_refused_before_any_work(copy_model, tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("kept\n")
    args = (copy_model.model, copy_model.tokenizer, copy_model.cfg.diagnostics)
    with pytest.raises(TranslatorError, match="is a file, not a directory") as err:
        attention.run(*args, copy_model.cfg.decode, ["ka lo"], out_dir=taken)
    assert err.value.where == str(taken) and taken.read_text() == "kept\n"


def test_translate_alignments_on_the_command_line(copy_model):
    result = run_cli(
        "translate",
        str(copy_model.path),
        "--alignments",
        "--alignment-layer",
        "0",
        stdin="ka lo mi\n\nnu pe ri so\n",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")[:-1]
    assert lines == ["ka lo mi\t0-0 1-1 2-2", "\t", "nu pe ri so\t0-0 1-1 2-2 3-3"]


def test_attention_run_takes_its_output_paths_as_strings(copy_model, tmp_path):
    """A Python caller's str paths, as every other entry point takes them."""
    args = (copy_model.model, copy_model.tokenizer, copy_model.cfg.diagnostics)
    figures, page, weights = tmp_path / "figs", tmp_path / "page.html", tmp_path / "w.tsv"
    attention.run(
        *args,
        copy_model.cfg.decode,
        ["ka lo"],
        out_dir=str(figures),
        html=str(page),
        tsv=str(weights),
    )
    assert any(figures.glob("*.png")) and page.is_file() and weights.is_file()
