"""`translator serve`: a model behind a small JSON-over-HTTP API (http_api.py's plumbing).

    POST /translate  {"text": ["A dog runs.", ...], "beam": 5, "nbest": 2, "prefix": ["Ein", ...],
                      "constraints": [["Hund"], ...]}
                 ->  {"translations": ["Ein Hund rennt.", ...],
                      "nbest": [[{"text": ..., "score": ...}, ...], ...],   (with "nbest")
                      "warnings": [...]}
    POST /score      {"source": [...], "target": [...]}  ->  {"scores": [...], "tokens": [...]}
    GET  /health     ->  {"status": "ok", "direction": "en->de", "device": "cpu", "dtype": ...}

"text" may be one string (then "translations" holds one, and "prefix" is one string too). Each
translation starts with its "prefix" ("" for none; as `translate --prefix`) and holds each phrase
of its "constraints" (a list of phrases, [] for none; as `translate --constraints`; a list of
such lists where "text" is a list; not with "prefix"). The model is loaded
once; requests are answered by threads and decode one at a time, in arrival order, on one thread
of their own (a batch of lines already fills the cores, and decoding with alignments is not
thread-safe). A request is bounded (lines, beam) so that none holds the model for minutes; a
malformed one gets a 4xx and {"error": ...}.
"""

from __future__ import annotations

import errno
import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from translator.config import Config, DecodeConfig
from translator.console import log as log_line
from translator.data.tokenizer import Tokenizer
from translator.device import DTYPE_NAMES
from translator.errors import TranslatorError, counted
from translator.http_api import JsonServer, Route
from translator.http_request import BadRequest, ClientLeft
from translator.loading import Checkpoints, load_models
from translator.model.ensemble import Ensemble
from translator.model.inference import is_int8
from translator.model.transformer import Transformer
from translator.score import score_lines
from translator.stream import compile_terms, model_precision
from translator.terminology import Terms, load_terms
from translator.translate import translate_lines, with_overrides

T = TypeVar("T")
MAX_LINES = 1000  # a request's lines: more go in several requests, so that none holds the model
MAX_CHARACTERS = 100_000  # ... and their characters (one long line is split into many pieces)
MAX_BEAM = 16  # per-request beam or n-best
# a line's constraint phrases: the constrained search's bookkeeping grows with them (in Python)
MAX_PHRASES = 16
DRAIN_SECONDS = 60  # at SIGTERM, how long requests being answered may take to finish


def _here() -> bool:
    """A direct call's `client_left`: there is no connection to lose."""
    return False


class Translator:
    """A loaded model and what answering a request with it takes; one request at a time."""

    def __init__(
        self,
        model: Transformer | Ensemble,
        cfg: Config,
        tokenizer: Tokenizer,
        decode: DecodeConfig,
        terms: Terms | None = None,
    ) -> None:
        """`terms`: a term list whose targets join the constraints of each line holding their
        source terms (as `translate --terminology`), in requests without a prefix."""
        self.model, self.cfg, self.tokenizer, self.decode = model, cfg, tokenizer, decode
        self.terms = terms
        # One thread touches the model. glibc gives each thread that allocates a heap of its own
        # (an arena) and keeps it at its peak: decoding in every connection's thread grew the
        # server by a decoding's working set per thread that ever decoded (docs/benchmarks.md).
        self.model_thread = ThreadPoolExecutor(1, thread_name_prefix="model")

    def on_model(self, work: Callable[[], T], client_left: Callable[[], bool]) -> T:
        """`work`'s result, computed on the model's thread after the requests before it; not
        computed (ClientLeft) when its client has gone by then, so that abandoned requests (a
        client's timeout, a closed browser tab) do not hold the model."""

        def unless_gone() -> T:
            if client_left():
                raise ClientLeft
            return work()

        return self.model_thread.submit(unless_gone).result()

    def routes(self) -> dict[tuple[str, str], Route]:
        return {
            ("POST", "/translate"): self.translate,
            ("POST", "/score"): self.score,
            ("GET", "/health"): lambda _body, _client_left: self.health(),
        }

    def translate(self, request: Any, client_left: Callable[[], bool] = _here) -> dict[str, Any]:
        _only_keys(request, {"text", "beam", "nbest", "prefix", "constraints"})
        text = request.get("text")
        lines = _lines([text] if isinstance(text, str) else text, "'text' must be a string or")
        prefixes = None
        if (prefix := request.get("prefix")) is not None:
            if isinstance(prefix, str) != isinstance(text, str):
                raise BadRequest("'prefix' must be a string where 'text' is one, else a list")
            one = [prefix] if isinstance(prefix, str) else prefix
            prefixes = _lines(one, "'prefix' must be a string or")
            if len(prefixes) != len(lines):
                raise BadRequest(
                    f"{counted(len(lines), 'line')} of text but "
                    f"{counted(len(prefixes), 'prefix', 'prefixes')}"
                )
            if not any(p.strip() for p in prefixes):  # all blank: none
                prefixes = None
        constraints = None
        if (asked := request.get("constraints")) is not None:
            if prefixes is not None:
                raise BadRequest("'prefix' and 'constraints' do not combine: give one of them")
            constraints = _constraint_lists(asked, isinstance(text, str), lines)
        if self.terms is not None and prefixes is None:
            constraints = self.terms.added_to(constraints, lines)
        beam = _small_int(request, "beam")
        nbest = _small_int(request, "nbest")
        decode = with_overrides(self.decode, beam_size=beam)
        warnings: list[str] = []
        with _refused_as_bad_request():
            found = self.on_model(
                lambda: translate_lines(
                    self.model,
                    self.tokenizer,
                    lines,
                    decode,
                    nbest or 1,
                    warn=warnings.append,
                    data=self.cfg.data,
                    prefixes=prefixes,
                    constraints=constraints,
                ),
                client_left,
            )
        reply: dict[str, Any] = {"translations": [hyps[0][0] for hyps in found]}
        if nbest:
            reply["nbest"] = [[{"text": t, "score": finite(s)} for t, s in hyps] for hyps in found]
        reply["warnings"] = warnings
        return reply

    def score(self, request: Any, client_left: Callable[[], bool] = _here) -> dict[str, Any]:
        _only_keys(request, {"source", "target"})
        sources = _lines(request.get("source"), "'source' must be")
        targets = _lines(request.get("target"), "'target' must be")
        if len(sources) != len(targets):
            raise BadRequest(
                f"{counted(len(sources), 'source')} but {counted(len(targets), 'target')}"
            )
        warnings: list[str] = []
        with _refused_as_bad_request():
            pairs = self.on_model(
                lambda: score_lines(
                    self.model,
                    self.tokenizer,
                    sources,
                    targets,
                    self.cfg.data,
                    self.decode.batch_tokens,
                    warn=warnings.append,
                ),
                client_left,
            )
        # JSON has no NaN: a pair too long to score is null
        scores = [finite(p.log_prob) for p in pairs]
        return {"scores": scores, "tokens": [p.tokens for p in pairs], "warnings": warnings}

    def health(self) -> dict[str, Any]:
        data, weight = self.cfg.data, next(self.model.parameters())
        dtype = "int8" if is_int8(self.model) else DTYPE_NAMES.get(weight.dtype, str(weight.dtype))
        return {
            "status": "ok",
            "direction": f"{data.src_lang}->{data.tgt_lang}",
            "device": str(weight.device),
            "dtype": dtype,
        }


@contextmanager
def _refused_as_bad_request() -> Iterator[None]:
    """What decoding refuses for this request (a beam wider than the vocabulary) is a 400."""
    try:
        yield
    except TranslatorError as err:
        raise BadRequest(str(err)) from None


def finite(score: float) -> float | None:
    """A score as JSON allows it: NaN and inf (not scored, or overflowed: warned) as null."""
    return score if math.isfinite(score) else None


def _only_keys(request: Any, keys: set[str]) -> None:
    if not isinstance(request, dict):
        raise BadRequest("the body is not a JSON object")
    if unknown := sorted(set(request) - keys):
        raise BadRequest(f"unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(keys))}")


def _lines(value: Any, must: str) -> list[str]:
    """A request's list of lines, within MAX_LINES and MAX_CHARACTERS; a lone UTF-16 surrogate
    (half an emoji that a client's string slicing left) becomes U+FFFD, as bad bytes do on
    translate's stdin."""
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        raise BadRequest(f"{must} a list of strings")
    if len(value) > MAX_LINES:
        raise BadRequest(f"{len(value)} lines, over {MAX_LINES} a request: send several")
    if (characters := sum(map(len, value))) > MAX_CHARACTERS:
        raise BadRequest(f"{characters} characters, over {MAX_CHARACTERS} a request: send several")
    # through UTF-16, whose decoder replaces a lone surrogate with one U+FFFD (UTF-8's with three)
    return [line.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for line in value]


def _constraint_lists(value: Any, one_text: bool, lines: list[str]) -> list[list[str]]:
    """A request's "constraints": phrases for one text, else a list of them per line; their
    characters count in the request's bound with the text's."""
    per_line = [value] if one_text else value
    if not isinstance(per_line, list) or not all(isinstance(p, list) for p in per_line):
        raise BadRequest(
            "'constraints' must be a list of phrases where 'text' is a string, else one such "
            "list a line"
        )
    if len(per_line) != len(lines):
        raise BadRequest(
            f"{counted(len(lines), 'line')} of text but {counted(len(per_line), 'constraint list')}"
        )
    if any(len(phrases) > MAX_PHRASES for phrases in per_line):
        raise BadRequest(f"over {MAX_PHRASES} constraints a line: give the ones that matter")
    phrases = [_lines(p, "'constraints' phrases must be") for p in per_line]
    characters = sum(map(len, lines)) + sum(len(t) for p in phrases for t in p)
    if characters > MAX_CHARACTERS:
        raise BadRequest(
            f"{characters} characters with the constraints', over {MAX_CHARACTERS} a request: "
            "send several"
        )
    return phrases


def _small_int(request: dict[str, Any], key: str) -> int | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_BEAM:
        raise BadRequest(f"{key!r} must be an integer from 1 to {MAX_BEAM}")
    return value


def run(
    ckpt: Checkpoints,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    beam: int | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    min_len: int | None = None,
    no_repeat_ngram_size: int | None = None,
    unk_penalty: float | None = None,
    length_penalty: float | None = None,
    batch_tokens: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    terminology: Path | None = None,
    quiet: bool = False,
) -> None:
    """The `serve` command: bind, load the checkpoint(s) once, answer until Ctrl-C or SIGTERM,
    then let the requests being answered finish (new ones get 503). Decoding settings left None
    are the checkpoint's decode.* values."""
    pairs = load_terms(terminology) if terminology is not None else None  # before binding
    routes: dict[tuple[str, str], Route] = {}  # filled once the model is loaded
    try:  # bound first: a port in use is refused before minutes of loading
        server = JsonServer(host, port, routes, log=None if quiet else log_line)
    except OSError as err:
        fix = "choose another --port" if err.errno == errno.EADDRINUSE else "check --host"
        where = f"{host}:{port}"
        raise TranslatorError(f"cannot listen there: {err.strerror or err}", where, fix) from None
    try:
        model, cfg, tokenizer = load_models(ckpt, device, dtype)
        decode = with_overrides(
            cfg.decode,
            beam_size=beam,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            min_len=min_len,
            no_repeat_ngram_size=no_repeat_ngram_size,
            unk_penalty=unk_penalty,
            length_penalty=length_penalty,
            batch_tokens=batch_tokens,
        )
        terms = compile_terms(pairs, terminology, tokenizer, cfg.data) if pairs else None
        routes.update(Translator(model, cfg, tokenizer, decode, terms).routes())
        address, bound = server.server_address[:2]
        address = f"[{address}]" if ":" in address else address
        # the first line, also with --quiet: the address alone, for a supervisor (or a test)
        log_line(f"serve: http://{address}:{bound} (POST /translate, /score; GET /health)")
        if not quiet:
            log_line(f"serve: {model_precision(model, dtype or cfg.decode.dtype)}")
    except BaseException:
        server.server_close()
        raise
    # Ctrl-C or SIGTERM: what is being answered is answered (a second one: at once)
    server.serve_until_stopped(DRAIN_SECONDS)
