"""sacreBLEU and chrF on detokenized output, for the `eval` command and for validation."""

from __future__ import annotations

from dataclasses import dataclass

import sacrebleu


@dataclass
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    lc_tok_bleu: float | None = None  # lowercased, 13a-tokenized BLEU (the Multi30k literature's)

    def lines(self) -> list[str]:
        out = [f"BLEU = {self.bleu:.2f}  ({self.bleu_signature})",
               f"chrF = {self.chrf:.2f}  ({self.chrf_signature})"]
        if self.lc_tok_bleu is not None:
            out.append(f"BLEU (lowercased, 13a-tokenized; as Multi30k papers report, not sacreBLEU) = "
                       f"{self.lc_tok_bleu:.2f}")
        return out


def score(hypotheses: list[str], references: list[str], lc_tok: bool = False) -> Scores:
    """Corpus-level scores of detokenized `hypotheses` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    lc = None
    if lc_tok:
        lc = sacrebleu.BLEU(lowercase=True, tokenize="13a").corpus_score(hypotheses, [references]).score
    return Scores(bleu_score.score, chrf_score.score, str(bleu.get_signature()), str(chrf.get_signature()), lc)


def run(ckpt: str, split: str, src_file: str | None, ref_file: str | None, hyp_file: str | None,
        beam: int | None, lc_tok: bool, device: str, dtype: str, quiet: bool = False) -> Scores:
    """Decode a prepared split (or --src/--ref files), write the hypotheses, and score them."""
    from pathlib import Path

    from translator import checkpoint
    from translator.errors import TranslatorError
    from translator.files import atomic_write, read_lines
    from translator.translate import resolve_device, resolve_dtype, translate_lines

    torch_device = resolve_device(device)
    model, cfg, tokenizer = checkpoint.load(ckpt, torch_device)
    model.to(resolve_dtype(dtype, torch_device))
    if beam is not None:
        cfg.decode.beam_size = beam
    if (src_file is None) != (ref_file is None):
        raise TranslatorError("--src and --ref go together", "eval", "give both, or neither to use a split")
    if src_file is None:
        folder = Path(cfg.data.data_dir) / cfg.data.name
        src_file, ref_file = folder / f"{split}.{cfg.data.src_lang}", folder / f"{split}.{cfg.data.tgt_lang}"
        if not Path(src_file).is_file():
            raise TranslatorError(f"split {split!r} not found", str(folder),
                                  "run `translator prepare` with the checkpoint's config, or pass --src/--ref")
    sources, refs = read_lines(src_file), read_lines(ref_file)
    if len(sources) != len(refs):
        raise TranslatorError(f"{src_file} has {len(sources)} lines but {ref_file} has {len(refs)}", "eval",
                              "source and reference files must be line-aligned")
    hyps = [h[0][0] for h in translate_lines(model, tokenizer, sources, cfg.decode)]
    hyp_path = Path(hyp_file) if hyp_file else Path(ckpt).parent / f"{Path(src_file).name}.hyp"
    with atomic_write(hyp_path) as handle:
        handle.write("".join(h + "\n" for h in hyps))
    return score(hyps, refs, lc_tok)
