"""bench.decode's bookkeeping: ratios pair runs of the same device, dtype and beam; the page keeps
its older sections. (The timing itself runs only under `make bench-decode`.)"""

from __future__ import annotations

from bench import decode


def run(system: str, dtype: str, beam: int, tokens_per_s: float, peak: int = 100) -> dict:
    return {
        "system": system,
        "device": "cpu",
        "dtype": dtype,
        "beam": beam,
        "tokens_per_s": tokens_per_s,
        "peak_mib": peak,
        "rss_after_warmup_mib": 50,
        "seconds": 1.0,
        "tokens": 10,
        "params": None,
    }


RESULTS = [
    run("ours", "float32", 4, 300.0),
    run("hf", "float32", 4, 150.0),
    run("ct2", "float32", 4, 200.0),
    run("ours", "int8", 4, 400.0),
    run("ct2", "int8", 4, 500.0),
    run("ours", "float32", 1, 900.0),
    run("hf", "float32", 1, 100.0),
]


def test_ratios_compare_the_same_device_dtype_and_beam():
    ours_fp32, hf, ct2, ours_int8, ct2_int8, greedy, hf_greedy = RESULTS
    assert decode.ratio(RESULTS, ours_fp32, "hf") == 2.0
    assert decode.ratio(RESULTS, ours_fp32, "ct2") == 1.5
    assert decode.ratio(RESULTS, ours_int8, "ct2") == 0.8
    assert decode.ratio(RESULTS, ours_int8, "hf") is None  # HF has no int8 run
    assert decode.ratio(RESULTS, ct2_int8, "hf", "float32") == 500 / 150
    assert (
        decode.ratio(RESULTS, greedy, "hf") == 9.0 and decode.ratio(RESULTS, greedy, "ct2") is None
    )
    assert decode.ratio(RESULTS, hf, "hf") is None


def test_table_and_per_pass_lines_show_every_run_with_its_peak_memory():
    rows = decode.table(RESULTS).splitlines()[2:]
    assert len(rows) == len(RESULTS)
    assert rows[0].startswith(
        "| ours (translator) | cpu | fp32 | 4 | 300 | 2.00x | 2.00x | 1.50x |"
    )
    second = [run(r["system"], r["dtype"], r["beam"], r["tokens_per_s"] / 2, 70) for r in RESULTS]
    lines = decode.per_pass([RESULTS, second])
    assert "- ours / ct2, cpu int8 beam 4: 400 (100 MiB) / 500 (100 MiB) = 0.80x; " in lines[2]
    assert lines[2].endswith("200 (70 MiB) / 250 (70 MiB) = 0.80x")
    assert len(lines) == 4  # ours fp32 vs HF and CT2, int8 vs CT2, greedy vs HF


def test_a_new_section_goes_under_the_title_and_the_old_ones_stay():
    page = "# Decoding speed\n\nDate: old.\n\n## 2026-11-30: old results\n\n| a |\n"
    new = decode.insert_section(page, "## 2026-12-01: new\n\n| b |\n")
    assert new.startswith("# Decoding speed\n\n## 2026-12-01: new\n\n| b |\n\nDate: old.")
    assert new.endswith("## 2026-11-30: old results\n\n| a |\n")
