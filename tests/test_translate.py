"""Lines in, lines out: order, empty lines, over-long lines and their joins, batching, <unk> counts,
loading."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from pathlib import Path

import pytest
import torch

from tests.conftest import MULTI30K, SENTENCES
from translator import config, guided, line_warnings, loading, search_warnings, translate
from translator.data import join, split
from translator.data.batching import make_batch
from translator.data.tokenizer import EOS_ID, UNK_ID, Tokenizer, train_sentencepiece
from translator.decode import Hypothesis
from translator.decode import search as decode_search
from translator.errors import TranslatorError


@pytest.mark.parametrize("beam_size", [1, 3])
def test_output_order_is_input_order(tiny, beam_size):
    # several batches
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size, batch_tokens=40)
    batched = translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES, decode)
    alone = [
        translate.translate_lines(tiny.model, tiny.tokenizer, [line], decode)[0]
        for line in SENTENCES
    ]
    assert [hyps[0][0] for hyps in batched] == [hyps[0][0] for hyps in alone]
    torch.testing.assert_close(
        [h[0][1] for h in batched], [h[0][1] for h in alone], atol=1e-4, rtol=1e-4
    )
    assert len({hyps[0][0] for hyps in batched}) > 1  # the outputs differ, so a mix-up would show


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("cuda_graphs", [True, False])
def test_every_decode_setting_reaches_the_search(tiny, beam_size, cuda_graphs, monkeypatch):
    """decode.* (and so the translate/eval flags) arrive at greedy and beam search unchanged."""
    seen = []
    for name in ("greedy_search", "beam_search"):
        search = getattr(decode_search, name)
        monkeypatch.setattr(
            decode_search,
            name,
            lambda *a, _search=search, _name=name, **kw: (
                seen.append((_name, kw)) or _search(*a, **kw)
            ),
        )
    decode = dataclasses.replace(
        tiny.cfg.decode,
        beam_size=beam_size,
        length_penalty=1.7,
        max_len_a=0.9,
        max_len_b=7,
        min_len=2,
        no_repeat_ngram_size=3,
        unk_penalty=2.5,
        cuda_graphs=cuda_graphs,
    )
    translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES[:2], decode)
    expected = {"max_len_a": 0.9, "max_len_b": 7, "min_len": 2, "cuda_graphs": cuda_graphs}
    expected.update(no_repeat_ngram=3, unk_penalty=2.5)
    if beam_size > 1:
        expected.update(alpha=1.7, beam_size=beam_size)
    assert seen and {name for name, _ in seen} == {
        "greedy_search" if beam_size == 1 else "beam_search"
    }
    for _, kw in seen:
        assert {key: kw[key] for key in expected} == expected


def test_empty_lines_give_empty_lines(tiny):
    lines = ["", SENTENCES[0], "   ", "", SENTENCES[1], "\t"]
    out = translate.translate_lines(tiny.model, tiny.tokenizer, lines, tiny.cfg.decode)
    assert len(out) == len(lines)
    assert [hyps[0][0] == "" for hyps in out] == [True, False, True, True, False, True]


@pytest.mark.parametrize("beam_size,nbest", [(1, 1), (3, 3)])
def test_an_empty_line_s_translation_gets_the_model_s_score_of_ending_at_once(
    tiny, beam_size, nbest
):
    """Not searched, but scored as a search would score "": log p(EOS | empty source), not 0
    (a probability of 1, which would rank it above every real translation)."""
    batch = make_batch([[]], [[]])  # the source is EOS alone; the decoder's input BOS alone
    with torch.inference_mode():
        logits = tiny.model(batch.src, batch.tgt_in, batch.src_mask)  # (1, 1, V)
    expected = logits.float().log_softmax(-1)[0, 0, EOS_ID].item()
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size)
    lines = ["", SENTENCES[0], " \t "]
    out = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, nbest)
    assert out[0] == out[2] and len(out[0]) == 1 and len(out[1]) == nbest
    assert expected < 0 and out[0][0][0] == ""
    assert out[0][0][1] == pytest.approx(expected, abs=1e-5)


def test_split_long_cuts_at_sentence_ends_then_word_starts(tiny):
    text = (
        "Two dogs play in the snow. " * 3 + "A man rides a bike down a very long and winding road."
    )
    ids = tiny.tokenizer.encode([text])[0]
    pieces = tiny.tokenizer.sp.id_to_piece(ids)
    parts = split.split_long(ids, 12, pieces)
    assert [i for part in parts for i in part] == ids and all(0 < len(p) <= 12 for p in parts)
    texts = tiny.tokenizer.decode(parts)
    assert texts[:3] == ["Two dogs play in the snow."] * 3  # whole sentences where they fit
    # no word is cut
    assert all(tiny.tokenizer.sp.id_to_piece(p[0]).startswith("\u2581") for p in parts)
    assert split.split_long(list(range(30)), 7, ["x"] * 30) == [
        list(range(i, min(i + 7, 30))) for i in range(0, 30, 7)
    ]


@pytest.mark.parametrize(
    "pieces, starts",
    [
        # Chinese: no space after 。 or ？, so the next sentence starts without a word start
        (["\u2581我", "喜欢", "苹果", "。", "你", "呢", "？", "他", "不", "。"], [0, 4, 7]),
        (["\u2581यह", "\u2581घर", "\u2581है", "।", "\u2581वह", "\u2581है", "।"], [0, 4]),  # danda
        (["\u2581هل", "\u2581هو", "؟", "\u2581نعم", "."], [0, 3]),  # Arabic question mark
        (["\u2581１", "．", "５", "\u2581m"], [0]),  # a full-width decimal point: no cut
        # ？ and ！ as SentencePiece's default nmt_nfkc normalisation writes them: ASCII
        (["\u2581你", "好", "吗", "?", "我", "很", "好", "!", "谢谢", "。"], [0, 4, 8]),
        (["\u2581Is", "\u2581it", "?", "it", "\u2581is"], [0]),  # not before a Latin piece
    ],
)
def test_split_long_cuts_after_the_sentence_ends_of_other_scripts(pieces, starts):
    """Over-long lines in other scripts were cut only at the length limit, mid-sentence."""
    ids = list(range(len(pieces)))
    parts = split.split_long(ids, 100, pieces)
    assert [part[0] for part in parts] == starts and sum(parts, []) == ids


def sentences_of_test2016(n: int) -> list[str]:
    """The first n Multi30k test sentences that start with a capital, each ending with a full
    stop."""
    lines = (MULTI30K / "test2016.en").read_text(encoding="utf-8").splitlines()
    return [
        line if line.endswith(split.SENTENCE_END) else line + "."
        for line in (raw.strip() for raw in lines)
        if line[:1].isupper()
    ][:n]


def test_a_split_line_is_cut_at_every_sentence_end_and_within_sentences_over_the_limit(tiny):
    # a single-sentence model translates a few sentences of a longer piece and stops: once a line
    # is split, each sentence is its own piece
    sentences = sentences_of_test2016(40)
    per_sentence = tiny.tokenizer.encode(sentences)
    limit = max(map(len, per_sentence)) - 1  # the longest sentence must be cut; most fit twice
    assert sum(len(a) + len(b) <= limit for a, b in zip(per_sentence, per_sentence[1:])) > 10
    ids = tiny.tokenizer.encode([" ".join(sentences)])[0]
    assert ids == [i for s in per_sentence for i in s]  # the sentences' tokens, in a row
    parts = split.split_long(ids, limit, tiny.tokenizer.sp.id_to_piece(ids))
    assert [i for part in parts for i in part] == ids and all(0 < len(p) <= limit for p in parts)
    rest = iter(parts)
    for sentence in per_sentence:  # consecutive pieces make up each sentence
        run = next(rest)
        while len(run) < len(sentence):
            run += next(rest)
        assert run == sentence
    assert next(rest, None) is None
    whole = {tuple(s) for s in per_sentence if len(s) <= limit}
    assert whole and whole <= {tuple(p) for p in parts}  # a sentence that fits is one piece
    assert any(len(s) > limit for s in per_sentence)


@pytest.mark.parametrize(
    "text, pieces",
    [
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("Dogs run, e.g. the big one. Cats sleep!", ["Dogs run, e.g. the big one.", "Cats sleep!"]),
        ("Look! 3 dogs.", ["Look!", "3 dogs."]),  # a number starts a sentence
    ],
)
def test_sentence_ends_are_told_from_abbreviations(tiny, text, pieces):
    ids = tiny.tokenizer.encode([text])[0]
    parts = split.split_long(ids, 100, tiny.tokenizer.sp.id_to_piece(ids))
    assert tiny.tokenizer.decode(parts) == pieces


@pytest.mark.parametrize(
    "max_positions, a, b",
    [(1024, 1.2, 10), (32, 1.2, 10), (40, 0.7, 3), (64, 2.0, 50), (64, 1.0, 200), (512, 0.0, 30)],
)
def test_a_piece_limit_leaves_room_for_the_longest_output(max_positions, a, b):
    decode = dataclasses.replace(config.DecodeConfig(), max_len_a=a, max_len_b=b)
    limit = split.piece_limit(max_positions, decode)
    positions = max_positions - 1
    assert min(positions, split.MIN_PIECE_TOKENS) <= limit <= positions
    if a == 0:
        assert limit == positions  # the output limit does not depend on the source
    elif limit > split.MIN_PIECE_TOKENS:  # the floor aside, the output fits uncapped
        assert a * limit + b <= positions
        assert limit == positions or a * (limit + 1) + b > positions  # and no piece is shorter


def test_a_line_whose_output_would_not_fit_is_split_though_its_source_fits(tiny):
    # 40 positions, a=1.2, b=10: a source of 30 tokens fits, but its 46-token output would not
    assert piece_limit(tiny) < 30 < tiny.cfg.model.max_positions - 1
    text = next(
        t
        for t in (" ".join(["dog"] * n) + "." for n in range(1, 60))
        if len(tiny.tokenizer.encode([t])[0]) == 30
    )
    warnings = []
    translate.translate_lines(
        tiny.model, tiny.tokenizer, [text], tiny.cfg.decode, warn=warnings.append
    )
    assert split_warnings(warnings) and split_warnings(warnings)[0].startswith("line 1: 30 tokens")


def test_outputs_ended_by_the_length_limit_are_named_in_a_warning(tiny, monkeypatch):
    lines = ["Two dogs.", "People walk.", "Several men.", ""]
    first = [ids[0] for ids in tiny.tokenizer.encode(lines[:3])]
    word = UNK_ID + 100
    # a = 0, b = 4: every output may have 4 tokens; at the 4th only EOS is allowed
    decode = dataclasses.replace(tiny.cfg.decode, max_len_a=0.0, max_len_b=4)
    monkeypatch.setattr(
        translate, "search", fake_search({first[0]: [word] * 4, first[1]: [word] * 3})
    )
    warnings = []
    translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, warn=warnings.append, first_line=7
    )
    # line 7 reached the limit; line 8 ended itself one token short; line 9 is one token
    assert warnings == [line_warnings.length_message([7])]
    assert warnings[0].startswith("the output of line 7 stopped at the length limit")
    assert "only shorter input lines help" not in warnings[0]  # max_len_b was the limit
    assert "--no-repeat-ngram-size 3 if it repeats" in warnings[0]  # a loop is the likelier cause


def test_a_length_limit_set_by_the_positions_is_not_blamed_on_max_len(tiny, monkeypatch):
    """max_len_b past the positions: the limit is max_positions - 1, which no flag raises."""
    positions = tiny.cfg.model.max_positions - 1
    first = tiny.tokenizer.encode(["Two dogs."])[0][0]
    decode = dataclasses.replace(tiny.cfg.decode, max_len_a=0.0, max_len_b=10 * positions)
    monkeypatch.setattr(translate, "search", fake_search({first: [UNK_ID + 100] * positions}))
    warnings = []
    translate.translate_lines(
        tiny.model, tiny.tokenizer, ["Two dogs."], decode, warn=warnings.append
    )
    assert warnings == [line_warnings.length_message([1], capped=True)]
    assert "only shorter input lines help" in warnings[0]


def test_source_pieces_outside_the_vocabulary_are_counted_in_a_warning(tiny):
    lines = ["Two dogs.", "A dog \U0001f436 runs to \u674e\u660e.", ""]
    unknown = tiny.tokenizer.encode(lines)[1].count(UNK_ID)
    assert unknown >= 2
    warnings = []
    translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, tiny.cfg.decode, warn=warnings.append, first_line=4
    )
    assert line_warnings.source_unk_message({5: unknown}) in warnings
    assert line_warnings.source_unk_message({5: 2}).startswith(
        "2 source pieces outside the model's vocabulary (read as <unk>, their meaning lost) in "
        "line 5;"
    )
    warnings.clear()
    translate.translate_lines(
        tiny.model, tiny.tokenizer, lines[:1], tiny.cfg.decode, warn=warnings.append
    )
    assert not any("source piece" in w for w in warnings)


def piece_limit(tiny) -> int:
    return split.piece_limit(tiny.cfg.model.max_positions, tiny.cfg.decode)


def split_warnings(warnings: list[str]) -> list[str]:
    """The warnings about split lines (a random model's outputs also run to the length limit)."""
    return [w for w in warnings if w.startswith("line ")]


def test_over_long_line_is_translated_in_pieces_with_a_warning(tiny):
    long_line = " ".join(SENTENCES * 2)  # well over the model's 24-token pieces
    warnings = []
    out = translate.translate_lines(
        tiny.model, tiny.tokenizer, [SENTENCES[1], long_line], tiny.cfg.decode, warn=warnings.append
    )
    assert len(out) == 2 and len(split_warnings(warnings)) == 1
    assert split_warnings(warnings)[0].startswith("line 2: ")
    ids = tiny.tokenizer.encode([long_line])[0]
    parts = split.split_long(ids, piece_limit(tiny), tiny.tokenizer.sp.id_to_piece(ids))
    assert len(parts) > 1
    pieces = tiny.tokenizer.decode(
        [hyps[0].tokens for hyps in decode_search.search(tiny.model, parts, tiny.cfg.decode)]
    )
    assert out[1][0][0] == " ".join(pieces)  # the pieces' translations, joined


def test_a_python_caller_gets_the_warnings_as_user_warnings_and_none_drops_them(tiny):
    long_line = " ".join(SENTENCES * 2)
    with pytest.warns(UserWarning, match=r"line 1: .*translated in \d+ pieces") as caught:
        translate.translate_lines(tiny.model, tiny.tokenizer, [long_line], tiny.cfg.decode)
    assert {Path(w.filename).name for w in caught} == {"test_translate.py"}  # the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        translate.translate_lines(
            tiny.model, tiny.tokenizer, [long_line], tiny.cfg.decode, warn=None
        )


def test_one_string_is_refused_not_translated_character_by_character(tiny):
    with pytest.raises(TypeError, match="a list of lines"):
        translate.translate_lines(tiny.model, tiny.tokenizer, "A dog runs.", tiny.cfg.decode)


@pytest.mark.parametrize("line", [None, b"A dog.", 3])
def test_a_line_that_is_not_text_is_named_by_its_index(tiny, line):
    from translator.score import score_lines

    with pytest.raises(TypeError, match=rf"lines\[1\] is {type(line).__name__}, not str"):
        translate.translate_lines(tiny.model, tiny.tokenizer, ["A dog.", line], tiny.cfg.decode)
    with pytest.raises(TypeError, match=rf"targets\[0\] is {type(line).__name__}, not str"):
        score_lines(tiny.model, tiny.tokenizer, ["A dog."], [line])


def test_length_batches_cover_every_index_within_the_budget():
    lengths = [5, 1, 9, 3, 3, 12, 7, 2, 40, 6]
    batches = list(translate.length_batches(lengths, batch_tokens=24))
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths, reverse=True)
    for batch in batches:
        assert len(batch) == 1 or len(batch) * (max(lengths[i] for i in batch) + 1) <= 24


@pytest.mark.parametrize("default", [torch.bfloat16, torch.float64], ids=["bf16", "fp64"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_caller_s_default_dtype_does_not_reach_the_search(tiny, beam_size, default):
    """A host program's torch.set_default_dtype leaves the searches' scores in float32."""
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size)
    expected = translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES[:4], decode, nbest=2)
    before = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        got = translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES[:4], decode, nbest=2)
    finally:
        torch.set_default_dtype(before)
    assert got == expected


def test_a_model_in_training_mode_decodes_and_scores_without_dropout_and_stays_in_it(tiny):
    """A back-translation loop hands in the model it trains: no dropout in the search or the
    scores, and the model is left in training mode."""
    from translator.model.transformer import Transformer
    from translator.score import score_lines

    settings = copy.deepcopy(tiny.cfg.model)
    settings.dropout = settings.attention_dropout = settings.activation_dropout = 0.5
    training = Transformer(settings)
    training.load_state_dict(tiny.model.state_dict())
    training.train()
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=2)
    lines = SENTENCES[:4]
    expected = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, nbest=2)
    assert translate.translate_lines(training, tiny.tokenizer, lines, decode, nbest=2) == expected
    assert training.training and all(m.training for m in training.modules())
    targets = [hyps[0][0] for hyps in expected]
    scores = score_lines(training, tiny.tokenizer, lines, targets, warn=None)
    want = score_lines(tiny.model, tiny.tokenizer, lines, targets, warn=None)
    assert [p.log_prob for p in scores] == [p.log_prob for p in want] and training.training


def test_alignments_point_only_at_words_the_output_text_shows(tiny):
    """Forced targets holding words made of <unk> alone, which the text drops: every target
    index is a word of the decoded text."""
    from translator.data.tokenizer import UNK_ID
    from translator.diagnostics.alignment import align

    words = tiny.tokenizer.target_sp.encode(["\u2581Hund", "\u2581Ball"])
    hund, ball = (w[-1:] for w in words)
    word_start = tiny.tokenizer.target_sp.piece_to_id("\u2581")
    target = [UNK_ID, *hund, word_start, UNK_ID, *ball]  # <unk> | Hund | ▁<unk> | Ball
    src = tiny.tokenizer.encode(["A dog and a ball."])
    shown = tiny.tokenizer.decode([target])[0].split()  # <unk> dropped, as translate prints
    (pairs,) = align(tiny.model, tiny.tokenizer, src, [target], layer=-1)
    assert pairs and max(t for _, t in pairs) < len(shown) == 2


def test_a_beam_wider_than_the_vocabulary_is_refused(tiny):
    vocab = tiny.cfg.model.vocab_size
    wide = dataclasses.replace(tiny.cfg.decode, beam_size=vocab + 1)
    with pytest.raises(TranslatorError, match=f"wider than the vocabulary \\({vocab} tokens\\)"):
        translate.translate_lines(tiny.model, tiny.tokenizer, ["A dog."], wide)
    with pytest.raises(TranslatorError, match="wider than the vocabulary"):
        translate.translate_lines(
            tiny.model, tiny.tokenizer, ["A dog."], tiny.cfg.decode, nbest=vocab + 1
        )


def test_load_puts_the_model_in_the_asked_dtype_and_it_translates(tiny):
    model, cfg, tokenizer = loading.load(tiny.path, "cpu", "bf16")
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training
    out = translate.translate_lines(model, tokenizer, ["", SENTENCES[0]], cfg.decode)
    assert out[0][0][0] == "" and len(out) == 2


def test_load_in_int8_quantises_the_fp32_model_on_the_cpu_and_it_translates(tiny):
    from translator.model.inference import is_int8

    # auto: the CPU, even with CUDA
    model, cfg, tokenizer = loading.load(tiny.path, "auto", "int8")
    weight = next(model.parameters())
    assert is_int8(model) and weight.dtype == torch.float32 and weight.device.type == "cpu"
    for beam_size in (1, 3):
        decode = dataclasses.replace(cfg.decode, beam_size=beam_size)
        out = translate.translate_lines(model, tokenizer, ["", *SENTENCES], decode)
        assert len(out) == len(SENTENCES) + 1 and out[0][0][0] == ""
    with pytest.raises(TranslatorError, match="CPU only"):
        loading.load(tiny.path, "cuda:0", "int8")
    with pytest.raises(TranslatorError, match="int8"):  # an unknown dtype's hint names it
        loading.load(tiny.path, "cpu", "int4")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_translate_lines_on_cuda(tiny, dtype):
    model, cfg, tokenizer = loading.load(tiny.path, "auto", dtype)
    assert next(model.parameters()).is_cuda
    for beam_size in (1, 4):
        cfg.decode.beam_size = beam_size
        out = translate.translate_lines(
            model, tokenizer, ["", *SENTENCES], cfg.decode, nbest=2 if beam_size > 1 else 1
        )
        assert len(out) == len(SENTENCES) + 1 and out[0][0][0] == ""


def test_an_over_long_lines_score_is_the_sum_of_its_pieces(tiny):
    long_line = " ".join(SENTENCES * 2)
    ids = tiny.tokenizer.encode([long_line])[0]
    parts = split.split_long(ids, piece_limit(tiny), tiny.tokenizer.sp.id_to_piece(ids))
    for beam_size, nbest in ((1, 1), (3, 2)):
        decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size)
        out = translate.translate_lines(
            tiny.model, tiny.tokenizer, [long_line], decode, nbest=nbest
        )
        expected = sum(hyps[0].score for hyps in decode_search.search(tiny.model, parts, decode))
        # one joined hypothesis
        assert len(out[0]) == 1 and out[0][0][1] == pytest.approx(expected, abs=1e-4)


def test_only_lines_over_the_limit_are_split(tiny):
    limit = piece_limit(tiny)
    by_length = {
        len(ids): text
        for text, ids in (
            (text, tiny.tokenizer.encode([text])[0])
            for text in (" ".join(["dog"] * n) for n in range(1, 2 * limit))
        )
    }
    warnings = []
    out = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        [by_length[limit], by_length[limit + 1]],
        tiny.cfg.decode,
        warn=warnings.append,
    )
    assert len(out) == 2 and [w.split(":")[0] for w in split_warnings(warnings)] == ["line 2"]


def test_load_takes_the_device_flag_over_the_checkpoints(tiny, monkeypatch):
    seen = []
    monkeypatch.setattr(
        loading, "resolve_device", lambda name: seen.append(name) or torch.device("cpu")
    )
    loading.load(tiny.path)
    loading.load(tiny.path, "cuda:1", "fp32")
    # None falls back to the checkpoint's decode.device; a flag wins
    assert seen == ["cpu", "cuda:1"]


@pytest.mark.parametrize(
    "texts, joined",
    [
        # Chinese: no space between sentences
        (["我喜欢吃苹果。", "他喜欢香蕉。"], "我喜欢吃苹果。他喜欢香蕉。"),
        (["私は猫が好きです。", "犬も好きです。"], "私は猫が好きです。犬も好きです。"),  # Japanese
        (["我用iPhone", "拍照。"], "我用iPhone拍照。"),  # a Latin word inside Chinese text
        # Korean spaces words
        (
            ["나는 사과를 좋아한다.", "그는 바나나를 좋아한다."],
            "나는 사과를 좋아한다. 그는 바나나를 좋아한다.",
        ),
        (["Ein Hund.", "Zwei Katzen."], "Ein Hund. Zwei Katzen."),
        # an empty piece keeps its place, as before
        (["Ein Hund.", "", "Katzen."], "Ein Hund.  Katzen."),
    ],
)
def test_pieces_are_joined_the_way_their_script_is_written(texts, joined):
    assert join.join_pieces(texts) == joined


def test_a_split_line_translated_into_chinese_is_rejoined_without_spaces(tiny, monkeypatch):
    long_line = " ".join(SENTENCES * 2)
    ids = tiny.tokenizer.encode([long_line])[0]
    n = len(split.split_long(ids, piece_limit(tiny), tiny.tokenizer.sp.id_to_piece(ids)))
    chinese = [f"第{i}句。" for i in range(n)]
    # a target side in Chinese
    monkeypatch.setattr(tiny.tokenizer, "decode", lambda rows: chinese[: len(rows)])
    out = translate.translate_lines(tiny.model, tiny.tokenizer, [long_line], tiny.cfg.decode)
    assert n > 1 and out[0][0][0] == "".join(chinese)


def fake_search(outputs: dict[int, list[int]]):
    """A search that answers a source whose first id is k with the tokens outputs[k] (else one
    ordinary token)."""

    def search(model, src_ids, decode, nbest=1, sampler=None, prefixes=None, constraints=None, **_):
        return [[Hypothesis(outputs.get(ids[0], [UNK_ID + 100]), -1.0)] * nbest for ids in src_ids]

    return search


def test_unk_tokens_are_counted_in_a_warning_not_dropped_unseen(tiny, monkeypatch):
    lines = ["Two dogs.", "People walk.", "Several men.", ""]
    first = [ids[0] for ids in tiny.tokenizer.encode(lines[:3])]
    assert len(set(first)) == 3
    word = UNK_ID + 100
    monkeypatch.setattr(
        translate,
        "search",
        fake_search({first[0]: [UNK_ID, word, UNK_ID], first[2]: [word, UNK_ID]}),
    )
    warnings = []
    out = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, tiny.cfg.decode, warn=warnings.append, first_line=11
    )
    assert warnings == [line_warnings.unk_message({11: 2, 13: 1})]
    assert (
        warnings[0].startswith(
            "3 <unk> tokens (characters outside the vocabulary) dropped from the output of "
            "lines 11, 13;"
        )
        and "data.byte_fallback: true" in warnings[0]
    )
    # the text itself stays clean
    assert "<unk>" not in out[0][0][0] and "\u2047" not in out[0][0][0]
    warnings.clear()
    translate.translate_lines(
        tiny.model, tiny.tokenizer, lines[1:2], tiny.cfg.decode, warn=warnings.append
    )
    assert warnings == []  # no <unk>, no warning


def test_unk_message_names_ten_lines_then_counts_the_rest():
    assert line_warnings.unk_message({4: 1}).startswith(
        "1 <unk> token (characters outside the vocabulary) dropped from the output of line 4;"
    )
    many = line_warnings.unk_message({line: 2 for line in range(1, 13)})
    assert (
        many.startswith("24 <unk> tokens")
        and "lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more;" in many
    )


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_a_greedy_score_is_on_the_beam_searchs_scale(tiny, alpha):
    # --nbest prints one kind of score at any --beam: beam search of width 1 finds the greedy
    # path, so both must score it alike (the summed log-prob under the length penalty)
    from translator.data.batching import pad, padding_mask
    from translator.data.tokenizer import EOS_ID
    from translator.decode.beam import beam_search

    decode = dataclasses.replace(tiny.cfg.decode, beam_size=1, length_penalty=alpha)
    ids = tiny.tokenizer.encode(SENTENCES)
    greedy = decode_search.search(tiny.model, ids, decode)
    src = pad(ids, suffix=[EOS_ID])
    beam = beam_search(tiny.model, src, padding_mask(src), beam_size=1, alpha=alpha)
    for (g,), (b, *_) in zip(greedy, beam):
        assert g.tokens == b.tokens and g.score == pytest.approx(b.score, abs=1e-4)


def test_a_line_break_in_a_decoded_output_stays_inside_its_line(tiny, monkeypatch):
    # a byte-fallback model can emit <0x0A> or <0x0D>: decoded, a line break inside the text
    breaks = "\n\r\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"
    real = tiny.tokenizer.decode
    monkeypatch.setattr(
        tiny.tokenizer, "decode", lambda rows: [f"a{breaks}b {text}" for text in real(rows)]
    )
    lines = ["Two dogs.", " ".join(SENTENCES * 2), "People walk."]  # the second is split
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=2)
    out = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, nbest=2)
    texts = [text for hyps in out for text, _ in hyps]
    assert len(texts) == 5 and all(text.startswith("a") and "b" in text for text in texts)
    assert all(len(text.splitlines()) == 1 for text in texts)


def test_a_stray_space_piece_leaves_no_double_or_trailing_space(tiny, monkeypatch):
    # a model may emit a bare U+2581: SentencePiece decodes it to a space beside the next one's
    real = tiny.tokenizer.decode
    monkeypatch.setattr(
        tiny.tokenizer, "decode", lambda rows: [f" x  {text} \u00a0y " for text in real(rows)]
    )
    out = translate.translate_lines(tiny.model, tiny.tokenizer, ["Two dogs."], tiny.cfg.decode)
    text = out[0][0][0]
    assert text.startswith("x ") and text.endswith(" \u00a0y") and "  " not in text


def test_sources_are_cleaned_as_the_training_text_was(tiny):
    # controls that prepare's cleaner turns into a space (NEL, U+001F) or removes (NUL)
    raw = ["Two\x85dogs run.", "Two\x1fdogs run.", "Two\x00 dogs run.\u200b", " Two  dogs run. "]
    clean = "Two dogs run."
    assert all(ids != tiny.tokenizer.encode([clean])[0] for ids in tiny.tokenizer.encode(raw[:3]))
    decode = tiny.cfg.decode
    expected = translate.translate_lines(tiny.model, tiny.tokenizer, [clean], decode)[0]
    out = translate.translate_lines(tiny.model, tiny.tokenizer, raw, decode, data=tiny.cfg.data)
    assert out == [expected] * len(raw)


def test_translate_and_eval_clean_their_sources(tiny, tmp_path):
    from typer.testing import CliRunner

    from translator import cli

    raw, clean = "Two\x85dogs run.\n", "Two dogs run.\n"
    said = [
        CliRunner().invoke(cli.app, ["translate", str(tiny.path), "-q"], input=text).stdout
        for text in (raw, clean)
    ]
    assert said[0] == said[1] != ""
    (tmp_path / "src").write_text(raw + clean, encoding="utf-8")
    (tmp_path / "ref").write_text("Zwei Hunde.\nZwei Hunde.\n", encoding="utf-8")
    hyp = tmp_path / "hyp"
    args = ["eval", str(tiny.path), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref")]
    result = CliRunner().invoke(cli.app, [*args, "-o", str(hyp), "-q"])
    assert result.exit_code == 0, result.output
    first, second = hyp.read_text(encoding="utf-8").split("\n")[:2]
    assert first == second == said[1].rstrip("\n")


@pytest.mark.parametrize("alpha", [-10.0, 10.0])
def test_the_widest_length_penalties_allowed_give_finite_scores(tiny, alpha):
    import math

    decode = dataclasses.replace(tiny.cfg.decode, beam_size=3, length_penalty=alpha)
    out = translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES[:3], decode, nbest=2)
    assert all(math.isfinite(score) for hyps in out for _, score in hyps)


def overflowing(model):
    """A copy of `model` whose every logit is NaN, as fp16 gives once activations pass 65,504."""
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.decoder_norm.weight[0] = float("nan")
    return broken


@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_an_overflowing_model_is_named_as_such_not_as_unk_or_by_a_traceback(tiny, mode):
    from translator.decode.sampling import Sampling

    decode = dataclasses.replace(tiny.cfg.decode, beam_size=3 if mode == "beam" else 1)
    said: list[str] = []
    found = translate.translate_lines(
        overflowing(tiny.model),
        tiny.tokenizer,
        SENTENCES[:3],
        decode,
        warn=said.append,
        sampling=Sampling(seed=1) if mode == "sampling" else None,
    )
    assert len(found) == 3  # one output a line, whatever they hold
    assert f"lines 1, 2, 3: {line_warnings.NOT_FINITE}" in said
    # nor is it blamed on the vocabulary or the length limit (line 3's split is true)
    assert not any("<unk>" in w or "length limit" in w for w in said), said
    # a sound model's lines are not called so
    said.clear()
    translate.translate_lines(tiny.model, tiny.tokenizer, SENTENCES[:3], decode, warn=said.append)
    assert not any(line_warnings.NOT_FINITE in w for w in said)


@pytest.mark.parametrize("beam_size,nbest", [(1, 1), (3, 3)])
def test_translations_start_with_their_prefix_and_other_lines_are_untouched(tiny, beam_size, nbest):
    """Several batches (sorted by length) of lines with and without prefixes: a prefix reaching
    another line, or a line without one changed, would show."""
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size, batch_tokens=40)
    lines = SENTENCES[:6]
    prefixes = ["Ein Hund", "", "Zwei Männer spielen", "", "", "Eine"]
    found = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, nbest, warn=None, prefixes=prefixes
    )
    plain = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, nbest, warn=None)
    for hyps, prefix, without in zip(found, prefixes, plain):
        assert len(hyps) == len(without)
        if prefix:
            assert all(text.startswith(prefix) for text, _ in hyps), (prefix, hyps)
        else:
            assert [t for t, _ in hyps] == [t for t, _ in without]
            assert [s for _, s in hyps] == pytest.approx([s for _, s in without], abs=1e-4)


def test_a_prefix_starts_a_split_lines_first_part_and_an_empty_source_stays_empty(tiny):
    long_line = " ".join(SENTENCES * 2)  # split into several parts
    out = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        [long_line, "", SENTENCES[0]],
        tiny.cfg.decode,
        warn=None,
        prefixes=["Zwei Hunde", "Ein", ""],
    )
    assert out[0][0][0].startswith("Zwei Hunde") and out[0][0][0].count("Zwei Hunde") == 1
    assert out[1][0][0] == ""


def test_a_prefix_longer_than_the_model_can_output_is_dropped_naming_its_line(tiny):
    """A stream goes on: that line is translated as without a prefix, the others as asked."""
    too_long = " ".join(["Hund"] * tiny.cfg.model.max_positions)
    said = []
    out = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        SENTENCES[:3],
        tiny.cfg.decode,
        warn=said.append,
        prefixes=["", too_long, "Zwei"],
        first_line=11,
    )
    plain = translate.translate_lines(
        tiny.model, tiny.tokenizer, SENTENCES[1:2], tiny.cfg.decode, warn=None
    )
    assert out[1] == plain[0] and out[2][0][0].startswith("Zwei")
    assert [line for line in said if "prefix" in line] == [
        f"line 12: the prefix is longer than the {tiny.cfg.model.max_positions - 1} tokens the "
        "model can output, so the line is translated without it; shorten the prefix"
    ]
    with pytest.raises(TranslatorError, match="prefixes: 1 given for 2 lines"):
        translate.translate_lines(
            tiny.model, tiny.tokenizer, SENTENCES[:2], tiny.cfg.decode, prefixes=["Ein"]
        )


@pytest.mark.parametrize("beam_size,nbest", [(1, 1), (4, 2)])
def test_translations_hold_their_constraints_and_other_lines_are_untouched(tiny, beam_size, nbest):
    """Several batches of lines with and without constraints (phrases a random model would not
    say): each constrained translation holds its phrases, the others are the plain search's."""
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size, batch_tokens=40)
    lines = SENTENCES[:7]  # line 3 is split for its length (the tiny model's 40 positions)
    constraints = [["Hund"], [], [], ["Zwei Männer", "spielen"], [" "], ["Eine"], []]
    said = []
    found = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, nbest, warn=said.append, constraints=constraints
    )
    plain = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, nbest, warn=None)
    for hyps, phrases, without in zip(found, constraints, plain):
        if any(p.strip() for p in phrases):  # an n-best lists only those that hold them
            assert 1 <= len(hyps) <= len(without)
            assert all(p in text for p in phrases for text, _ in hyps), (phrases, hyps)
        else:  # none, or only a blank one
            assert len(hyps) == len(without)
            assert [t for t, _ in hyps] == [t for t, _ in without]
            assert [s for _, s in hyps] == pytest.approx([s for _, s in without], abs=1e-4)
    assert not [w for w in said if line_warnings.MISSED_CONSTRAINT in w]
    # a warning names the lines with no more beam slots than constraint tokens
    encode = tiny.tokenizer.target_sp.encode
    tokens = [sum(len(encode(p)) for p in c if p.strip()) for c in constraints]
    narrow = [str(n + 1) for n, t in enumerate(tokens) if t and t >= max(beam_size, nbest)]
    warned = [w for w in said if line_warnings.NARROW_BEAM in w]
    where = f"line{'s' * (len(narrow) > 1)} {', '.join(narrow)}"
    assert warned == ([f"{where}: {line_warnings.NARROW_BEAM}"] if narrow else [])
    assert beam_size > 1 or narrow == ["1", "4", "6"]


def test_a_constraint_the_search_cannot_place_is_named_in_a_warning(tiny):
    """No 1-gram may repeat, so a phrase of one word twice cannot be placed."""
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=4, no_repeat_ngram_size=1)
    said = []
    found = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        SENTENCES[:2],
        decode,
        warn=said.append,
        constraints=[["Hund"], ["Hund Hund"]],
        first_line=5,
    )
    assert "Hund" in found[0][0][0] and "Hund Hund" not in found[1][0][0]
    assert f"line 6: {line_warnings.MISSED_CONSTRAINT}" in said


def test_constraints_that_cannot_be_placed_are_dropped_with_a_warning_naming_the_line(tiny):
    """A split line, a phrase the vocabulary cannot spell, constraints longer than the model's
    outputs: the line is translated as without constraints, the others keep theirs."""
    long_line = " ".join(SENTENCES * 2)  # split into several parts
    too_long = " ".join(["Hund"] * tiny.cfg.model.max_positions)
    lines = [long_line, SENTENCES[1], SENTENCES[4], SENTENCES[3], SENTENCES[6]]
    constraints = [["Hund"], ["東京"], ["Ein", too_long], [], ["Hund"]]
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=4)
    said = []
    out = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        lines,
        decode,
        warn=said.append,
        constraints=constraints,
        first_line=7,
    )
    plain = translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, warn=None)
    assert [hyps[0][0] for hyps in out[:4]] == [hyps[0][0] for hyps in plain[:4]]
    assert "Hund" in out[4][0][0]
    ending = "; translated without them"
    assert (
        f"line 7: too long to translate at once, so its constraints cannot be placed{ending}"
        in said
    )
    assert (
        f"line 8: a constraint holds characters the model's vocabulary lacks (<unk>){ending}"
        in said
    )
    assert (
        f"line 9: the constraints are longer than the 39 tokens the model can output{ending}"
        in said
    )


def test_constraints_are_refused_beside_a_prefix_and_an_empty_source_stays_empty(tiny):
    lines, decode = [SENTENCES[0], SENTENCES[1]], tiny.cfg.decode
    with pytest.raises(TranslatorError, match="do not combine with a prefix or sampling"):
        translate.translate_lines(
            tiny.model, tiny.tokenizer, lines[:1], decode, constraints=[["Ein"]], prefixes=["E"]
        )
    with pytest.raises(TranslatorError, match="constraints: 1 given for 2 lines"):
        translate.translate_lines(tiny.model, tiny.tokenizer, lines, decode, constraints=[["E"]])
    out = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        ["", SENTENCES[1]],
        decode,
        warn=None,
        constraints=[["Hund"], ["Hund"]],
    )
    assert out[0][0][0] == "" and "Hund" in out[1][0][0]


def test_a_prefixs_last_word_is_spelled_as_text_and_its_whole_words_forced(tiny):
    encode = tiny.tokenizer.target_sp.encode
    piece = tiny.tokenizer.target_sp.id_to_piece
    ids, typed, tokens = guided.split_prefix(tiny.tokenizer, "Ein Ma", None, 39)
    assert ids == encode("Ein") and typed == "".join(piece(encode("Ma"))) and typed[0] == "▁"
    assert tokens == len(ids) + len(encode("Ma"))
    # a prefix ending in a space: its words are whole, the next piece starts a word
    assert guided.split_prefix(tiny.tokenizer, "Ein Mann ", None, 39)[:2] == (
        encode("Ein Mann"),
        "▁",
    )
    assert guided.split_prefix(tiny.tokenizer, "Ma", None, 39)[:2] == ([], typed)
    # a last word the vocabulary cannot spell is forced whole, as encoded
    assert guided.split_prefix(tiny.tokenizer, "Ein 東", None, 39)[:2] == (encode("Ein 東"), "")
    # ... as is one whose last word, a character a piece, might not fit in the model's outputs
    limit = len(encode("Ein")) + len(typed) - 1
    assert guided.split_prefix(tiny.tokenizer, "Ein Ma", None, limit)[:2] == (
        encode("Ein Ma"),
        "",
    )


@pytest.mark.parametrize("beam_size,nbest", [(1, 1), (3, 3)])
def test_a_prefix_ending_inside_a_word_is_completed_in_the_models_spelling(tiny, beam_size, nbest):
    decode = dataclasses.replace(tiny.cfg.decode, beam_size=beam_size, batch_tokens=40)
    lines = [SENTENCES[1], SENTENCES[3], SENTENCES[4], SENTENCES[6]]
    prefixes = ["Ein Ma", "Zw", "Ein ", "Eine Frau spiel"]
    found = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, nbest, warn=None, prefixes=prefixes
    )
    for hyps, prefix in zip(found, prefixes):
        assert len(hyps) == nbest
        assert all(text.startswith(prefix) for text, _ in hyps), (prefix, hyps)
    # after "Ein " a word follows: the next piece starts one (the text goes on after the space)
    assert all(len(text) > len("Ein ") for text, _ in found[2])


def test_constraints_hold_in_a_reranked_nbest_and_are_checked_in_type(tiny):
    """A channel reranks only the candidates that hold the phrases; a phrase given twice is one;
    the one-text shape of serve's field is refused from Python, not spelt out letter by letter."""
    from translator.rerank import Channel

    decode = dataclasses.replace(tiny.cfg.decode, beam_size=4)
    lines, constraints = [SENTENCES[1], SENTENCES[4]], [["Hund", "Hund"], ["Frau"]]
    channel = Channel(tiny.model, tiny.tokenizer, 5.0, 1.0, 4)
    found = translate.translate_lines(
        tiny.model,
        tiny.tokenizer,
        lines,
        decode,
        2,
        warn=None,
        constraints=constraints,
        channel=channel,
    )
    for hyps, phrases in zip(found, constraints):
        assert hyps and all(p in text for p in phrases for text, _ in hyps), hyps
    once = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, warn=None, constraints=[["Hund"], ["Frau"]]
    )
    twice = translate.translate_lines(
        tiny.model, tiny.tokenizer, lines, decode, warn=None, constraints=constraints
    )
    assert once == twice
    with pytest.raises(TypeError, match="a list of phrases"):
        translate.translate_lines(
            tiny.model, tiny.tokenizer, lines, decode, constraints=["Hund", "Frau"]
        )


def test_an_aligned_constrained_nbest_gives_each_hypothesis_its_own_alignment(tiny, monkeypatch):
    """A hypothesis that lacks a phrase leaves the n-best before alignments are read: the one
    kept gets its own alignment, as when the search found it alone."""
    encode = tiny.tokenizer.target_sp.encode
    holding, lacking = encode("Zwei Hunde laufen ."), encode("Eine Katze")

    def search_finding(answer):
        def search(model, src_ids, decode, nbest=1, **_):
            return [[Hypothesis(tokens, -1.0) for tokens in answer] for _ in src_ids]

        return search

    monkeypatch.setattr(translate, "search", search_finding([lacking, holding]))
    args = (tiny.model, tiny.tokenizer, [SENTENCES[1]], tiny.cfg.decode, 2)
    found = translate.translate_lines(*args, warn=None, constraints=[["Hunde"]], alignment_layer=-1)
    monkeypatch.setattr(translate, "search", search_finding([holding]))
    alone = translate.translate_lines(*args, warn=None, alignment_layer=-1)
    assert found == alone and found[0][0][0].startswith("Zwei Hunde")


def test_the_length_limit_warning_counts_the_room_constraints_add():
    """The constrained search's limit is the usual one plus the constraints' tokens: an output
    the model ended below it was not cut; one at it was (and at max_positions - 1, says so)."""
    decode = config.DecodeConfig(max_len_a=1.2, max_len_b=10)  # a 10-token source: 22 tokens
    source, ended, cut = [[5] * 10], [[Hypothesis([7] * 23, -1.0)]], [[Hypothesis([7] * 25, -1.0)]]
    at_limit = search_warnings.at_length_limit
    assert at_limit(source, [0], ended, decode, 255, added=[3]) == ([], False)
    assert at_limit(source, [0], cut, decode, 255, added=[3]) == ([0], False)
    assert at_limit(source, [0], cut, decode, 24, added=[3]) == ([0], True)


def test_a_phrase_in_a_script_without_spaces_follows_the_text_before_it_directly(tmp_path):
    """Encoded as inside a sentence: a Chinese phrase after Chinese text decodes without a space
    before it (SentencePiece would mark it as a text's first word); a German phrase keeps its
    word start, as it follows a space."""
    lines = [
        "我们在东京使用这个术语。",
        "他们在公园里看书。",
        "Ein Mann fährt Fahrrad.",
        "术语很重要。",
    ]
    tokenizer = Tokenizer(train_sentencepiece(lines * 30, tmp_path / "zh", vocab_size=60))
    decode = tokenizer.target_sp.decode
    before = tokenizer.target_sp.encode("他们在公园里看书")
    chinese, german = guided.encode_phrases(tokenizer, ["使用这个术语", "Fahrrad"])
    assert decode(before + chinese) == "他们在公园里看书使用这个术语"
    assert decode(tokenizer.target_sp.encode("Ein Mann fährt") + german) == "Ein Mann fährt Fahrrad"
    # the whole path: the constraint's ids are these
    required = guided.constraint_pieces(
        tokenizer, [["使用这个术语"]], ["x"], [0], None, 39, None, 1
    )
    assert required == [[chinese]]


def test_arguments_a_python_caller_can_get_wrong_are_one_line_errors(tiny):
    args = (tiny.model, tiny.tokenizer, ["A dog.", "A cat."], tiny.cfg.decode)
    with pytest.raises(TranslatorError, match="nbest=0"):
        translate.translate_lines(*args, nbest=0)
    with pytest.raises(TranslatorError, match="prefixes: 1 given for 2 lines"):
        translate.translate_lines(*args, prefixes=["Ein"])
    with pytest.raises(TranslatorError, match="constraints: 3 given for 2 lines"):
        translate.translate_lines(*args, constraints=[[], [], []])
