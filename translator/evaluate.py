"""`translator eval`: translate a test set (a prepared split or --src/--ref files) and score it
(bleu.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from unicodedata import is_normalized

from translator.bleu import (
    UNSPACED_LANGUAGES,
    Scores,
    bleu_language,
    bleu_metric,
    score,
    term_use,
    unspaced_script,
    unspaced_warning,
)
from translator.config import DataConfig, DecodeConfig
from translator.console import log, sentence_progress, warn_stderr
from translator.data.clean import holds_removed
from translator.errors import TranslatorError, counted
from translator.files import atomic_write, read_aligned
from translator.loading import Checkpoints, checkpoint_list, load_channel, load_models
from translator.prepared import prepared_dir, read_manifest
from translator.prepared_files import check_files
from translator.stream import compile_terms, model_precision
from translator.terminology import load_terms
from translator.translate import search_beam, translate_lines, with_overrides

if TYPE_CHECKING:
    from translator.model.ensemble import Ensemble
    from translator.model.transformer import Transformer
    from translator.rerank import Channel


def run(
    ckpt: Checkpoints,
    *,
    split: str | None = None,
    src_file: str | Path | None = None,
    ref_file: str | Path | None = None,
    hyp_file: str | Path | None = None,
    beam: int | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    min_len: int | None = None,
    no_repeat_ngram_size: int | None = None,
    unk_penalty: float | None = None,
    length_penalty: float | None = None,
    batch_tokens: int | None = None,
    lc_tok: bool = False,
    tokenize: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    cuda_graphs: bool | None = None,
    channel: Checkpoints | None = None,
    channel_weight: float | None = None,
    channel_candidates: int | None = None,
    terminology: Path | None = None,
    quiet: bool = False,
) -> Scores:
    """The `eval` command: decode a prepared split (`split`, default test; or --src/--ref files),
    write the hypotheses, and score them.

    Hypotheses go to `hyp_file`, by default beside the checkpoint (default_hyp_file). BLEU
    is tokenized as `tokenize` says, else as the checkpoint's validation was
    (train.valid_bleu_tokenize), else for its target language (data.tgt_lang).
    `channel`: checkpoint(s) of the reverse direction that rerank each n-best
    (translator/rerank.py). `terminology`: a term list whose targets become the constraints of
    the sources holding their source terms (translator/terminology.py); the scores then say how
    many of those targets the hypotheses hold.
    """
    split = _check_inputs(split, src_file, ref_file)
    pairs = load_terms(terminology) if terminology is not None else None
    model, cfg, tokenizer = load_models(ckpt, device, dtype)
    terms = compile_terms(pairs, terminology, tokenizer, cfg.data) if pairs is not None else None
    cfg.decode = with_overrides(
        cfg.decode,
        beam_size=beam,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        no_repeat_ngram_size=no_repeat_ngram_size,
        unk_penalty=unk_penalty,
        length_penalty=length_penalty,
        batch_tokens=batch_tokens,
        cuda_graphs=cuda_graphs,
        channel_weight=channel_weight,
        channel_candidates=channel_candidates,
    )
    tokenize = tokenize or cfg.train.valid_bleu_tokenize
    bleu_metric(cfg.data.tgt_lang, tokenize)  # a missing tokenizer fails before decoding
    reranker = None
    if channel is not None:
        reranker = load_channel(channel, cfg.data, cfg.decode, device, dtype)
    if src_file is None or ref_file is None:
        src_file, ref_file = _split_files(cfg.data, split)
    sources, refs = _read_test_set(Path(src_file), Path(ref_file), cfg.data)
    _warn_of_tokenizing(refs, cfg.data.tgt_lang, tokenize, lc_tok)
    hyp_path = Path(hyp_file) if hyp_file else default_hyp_file(ckpt, ref_file)
    if hyp_path.resolve() in (Path(src_file).resolve(), Path(ref_file).resolve()):
        raise TranslatorError(
            "the hypotheses would overwrite an input", str(hyp_path), "give another -o file"
        )
    # opened first: an unwritable path fails before decoding; a name picked here replaces a link
    with atomic_write(hyp_path, follow_link=bool(hyp_file)) as handle:
        if not quiet:
            log(f"eval: {model_precision(model, dtype or cfg.decode.dtype)}")
        with sentence_progress("eval", quiet) as progress:
            # warnings stay under --quiet: they are about the data and explain a score
            required = terms.added_to(None, sources) if terms else None
            translated = translate_lines(
                model,
                tokenizer,
                sources,
                cfg.decode,
                warn=warn_stderr,
                progress=progress,
                channel=reranker,
                data=cfg.data,
                constraints=required,
            )
        hyps = [h[0][0] for h in translated]
        handle.write("".join(h + "\n" for h in hyps))
    if not quiet:
        log(f"{counted(len(hyps), 'hypothesis', 'hypotheses')} written to {hyp_path}")
    scores = score(hyps, refs, tgt_lang=cfg.data.tgt_lang, lc_tok=lc_tok, tokenize=tokenize)
    if required is not None:
        scores.terms = term_use(required, hyps, refs)
    scores.decoded = _decoded(cfg.decode, model, reranker)
    scores.test_set = f"{counted(len(refs), 'line')} of {src_file} against {ref_file}"
    return scores


def _warn_of_tokenizing(refs: list[str], tgt_lang: str, tokenize: str, lc_tok: bool) -> None:
    """Warn when BLEU's tokenizer splits the references at spaces they do not have."""
    if warning := unspaced_warning(refs, tgt_lang, tokenize):
        warn_stderr(warning)
    if lc_tok and (bleu_language(tgt_lang) in UNSPACED_LANGUAGES or unspaced_script(refs)):
        warn_stderr(
            "--lc-tok's BLEU tokenizes with 13a, as the Multi30k papers do, which splits only at "
            "spaces: for this target, written without spaces between words, it is not a measure"
        )


def _decoded(d: DecodeConfig, model: Transformer | Ensemble, reranker: Channel | None) -> str:
    """How the hypotheses were decoded, for the scores' `decoded:` line."""
    # model_precision(model, ""): what it decoded in, not why
    beam = search_beam(d.beam_size, channel=reranker)  # a channel's candidates widen it
    how = f"beam {beam}, length penalty {d.length_penalty}, {model_precision(model, '')}"
    if reranker is None:
        return how
    channel = f"{reranker.candidates}-best reranked by a channel model at weight {reranker.weight}"
    return f"{how}, {channel}"


def default_hyp_file(ckpt: Checkpoints, ref_file: str | Path) -> Path:
    """`<reference file name>.<checkpoint stem>.hyp` beside the (first) checkpoint, e.g.
    test.de.best.hyp; `...ensemble.hyp` for several: so that scoring avg.pt after best.pt keeps
    both files for a paired comparison."""
    ckpts = checkpoint_list(ckpt)
    stem = ckpts[0].stem if len(ckpts) == 1 else "ensemble"
    return ckpts[0].parent / f"{Path(ref_file).name}.{stem}.hyp"


def _check_inputs(
    split: str | None, src_file: str | Path | None, ref_file: str | Path | None
) -> str:
    """The split to score when no files are given (test by default); refuses mixed requests."""
    if (src_file is None) != (ref_file is None):
        raise TranslatorError(
            "--src and --ref go together", "eval", "give both, or neither to use a split"
        )
    if src_file is not None and split is not None:
        raise TranslatorError(
            "--split and --src/--ref both name what to score", "eval", "give one of them"
        )
    return split or "test"


def _split_files(data: DataConfig, split: str) -> tuple[Path, Path]:
    """A prepared split's source and reference files (prepare copies them to data/<name>/)."""
    folder = prepared_dir(data)
    src_file = folder / f"{split}.{data.src_lang}"
    if not src_file.is_file():
        relative = "" if folder.is_absolute() else f" (a path relative to {Path.cwd()})"
        raise TranslatorError(
            f"split {split!r} not found{relative}",
            str(folder),
            "run where the data were prepared, run `translator prepare` with the checkpoint's "
            "config, or pass --src/--ref",
        )
    ref_file = folder / f"{split}.{data.tgt_lang}"
    if (folder / "manifest.json").is_file():  # a truncated copy would score fewer lines
        check_files(folder, read_manifest(folder), {src_file.name, ref_file.name})
    return src_file, ref_file


def _read_test_set(src_file: Path, ref_file: Path, data: DataConfig) -> tuple[list[str], list[str]]:
    """Sources and references, line-aligned and not empty; warns when references hold what the
    model cannot write: text not in NFC, or characters its training text was cleaned of."""
    sources, refs = read_aligned(src_file, ref_file, "eval")
    if not sources:
        raise TranslatorError(
            "nothing to score: the files are empty", str(src_file), "give a non-empty test set"
        )
    if data.normalize_spaces and (removed := sum(map(holds_removed, refs))):
        # BLEU and chrF count them (a zero-width space is no whitespace to either)
        warn_stderr(
            f"{ref_file}: {removed} of {len(refs)} references hold zero-width spaces, control "
            "characters or byte-order marks, which the training text was cleaned of and the "
            "model never writes; that lowers BLEU and chrF: remove them from the references"
        )
    if data.nfc and (decomposed := sum(not is_normalized("NFC", r) for r in refs)):
        # BLEU and chrF compare code points: an NFD "ü" (u + U+0308) never matches the model's
        warn_stderr(
            f"{ref_file}: {decomposed} of {len(refs)} references are not in Unicode NFC (the "
            "model writes NFC), which lowers BLEU and chrF; normalise them, e.g. with "
            "`uconv -x any-nfc`"
        )
    return sources, refs
