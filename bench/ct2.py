"""bench.decode's CTranslate2 system, kept free of torch: its process's peak RSS is then what a
CTranslate2 deployment holds (the library, the model and the search), as ours is for us."""

from __future__ import annotations

from pathlib import Path


def load(spec: dict, model_dir: Path) -> tuple:
    """(decode(batch) -> target tokens, parameters) for a spec."""
    import ctranslate2

    translator = ctranslate2.Translator(
        str(model_dir),
        device=spec["device"],
        compute_type=spec["dtype"],
        inter_threads=1,
        intra_threads=spec["threads"],  # as many as torch uses in the other processes
    )

    def decode(batch: dict) -> int:
        """One batch to exactly L + 1 decoder steps: no token may end it sooner (min length)."""
        L = batch["length"]
        results = translator.translate_batch(
            batch["pieces"],
            beam_size=spec["beam"],
            length_penalty=0.0,
            min_decoding_length=L + 1,
            max_decoding_length=L + 1,
            max_batch_size=0,
        )
        assert all(len(r.hypotheses[0]) == L + 1 for r in results)
        return len(batch["pieces"]) * (L + 1)

    return decode, None  # parameters: those of ours, which it holds
