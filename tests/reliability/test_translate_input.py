"""`translate` on any input: never a crash, one output line per input line, in order, blank gives
blank.

Decoding one sentence per batch (batch_tokens=1) makes each line's output exactly what translating
it alone gives, so order can be checked against that reference while the lines are still
length-sorted and restored.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from translator import checkpoint, input_lines, stream, translate

# "\n" ends a line
ANY_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")
LINES = st.one_of(
    st.text(ANY_CHAR, max_size=30),  # random Unicode: CR, controls, combining marks, other scripts
    st.text(st.sampled_from(" \t\r\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000"), max_size=6),  # blank
    # controls only
    st.text(st.sampled_from("\x00\x01\x07\x1b\x7f\x9f\u200b\ufeff"), min_size=1, max_size=6),
    # longer than the model's positions: split and joined
    st.builds(
        lambda word, n: " ".join([word] * n),
        st.sampled_from(["dog", "Hund.", "ü\r", "日本"]),
        st.integers(60, 150),
    ),
    st.builds(
        lambda a, b: f"{a}\r{b}", st.text(ANY_CHAR, max_size=10), st.text(ANY_CHAR, max_size=10)
    ),
)


@pytest.fixture(scope="module")
def loaded(checkpoint_file):
    return checkpoint.load(checkpoint_file)


# random characters outside the tiny model's vocabulary: warned about, and translated all the same
@pytest.mark.filterwarnings("ignore:.*outside the model's vocabulary:UserWarning")
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(LINES, min_size=1, max_size=6))
def test_one_line_out_per_line_in_in_order(loaded, tmp_path, lines):
    model, cfg, tokenizer = loaded
    decode = translate.with_overrides(cfg.decode, batch_tokens=1)
    path = tmp_path / "input.txt"
    path.write_bytes("".join(line + "\n" for line in lines).encode())
    out = io.StringIO()
    with open(path) as stdin:  # a real file descriptor: the path `translate` reads stdin by
        count = stream.translate_chunks(
            model, tokenizer, decode, input_lines.read_chunks(stdin, max_lines=4), out
        )
    got = out.getvalue().split("\n")
    assert got.pop() == "" and len(got) == count == len(lines)
    for line, output in zip(lines, got):
        line = line.rstrip("\r")  # CRs before the newline are the line ending (CRLF)
        alone = translate.translate_lines(model, tokenizer, [line], decode)[0][0][0]
        assert output == alone, line
        if not line.strip():
            assert output == ""


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.text(
        st.sampled_from(["a", "é", "\n", "\r", "\x85", "\u2028", "\x0c", " "]), max_size=20
    )
)
def test_a_stream_without_a_descriptor_is_split_like_stdin(tmp_path, text):
    path = tmp_path / "input.txt"
    path.write_bytes(text.encode())
    with open(path) as stdin:
        from_fd = [line for chunk in input_lines.read_chunks(stdin) for line in chunk]
    from_stream = [
        line for chunk in input_lines.read_chunks(io.StringIO(text, newline="")) for line in chunk
    ]
    assert from_stream == from_fd
