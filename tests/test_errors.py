"""The pieces every error message is made of (translator/errors.py)."""

from translator.errors import counted


def test_a_count_s_noun_agrees_with_it():
    assert [counted(n, "line") for n in (0, 1, 2)] == ["0 lines", "1 line", "2 lines"]
    assert counted(1, "prefix", "prefixes") == "1 prefix"
    assert counted(3, "prefix", "prefixes") == "3 prefixes"
