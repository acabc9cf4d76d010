"""Output processing on its own: stop strings (earliest in the text wins; only the window the
new characters could complete is searched), the held-back tail of a running sample, and the
per-token finish decisions, on hand-worked strings and a stub-free tokenizer-less state."""

from __future__ import annotations

from local_engine.output_processor import find_stop_string, visible_text


def test_find_stop_string_earliest_in_the_text_not_in_the_list():
    # "world" starts at 6, "lo" at 3: the text order decides, not the list order
    assert find_stop_string("hello world", ["world", "lo"], delta_len=11) == (3, "lo")
    assert find_stop_string("hello world", ["xyz"], delta_len=11) is None


def test_find_stop_string_searches_only_where_the_delta_could_complete_one():
    # "ab" ends at index 2; a delta of 1 character ("d") cannot complete it: start = 4-1-2+1 = 2
    assert find_stop_string("abcd", ["ab"], delta_len=1) is None
    # a stop that straddles the old text and the delta: "cd" with delta "d" (start = 4-1-2+1 = 2)
    assert find_stop_string("abcd", ["cd"], delta_len=1) == (2, "cd")


def test_visible_text_holds_back_the_longest_prefix_of_a_stop():
    assert visible_text("Hello, wor", ["world"]) == "Hello, "  # "wor" may become "world"
    assert visible_text("Hello, w", ["world", "wxyz"]) == "Hello, "
    assert visible_text("Hello", ["world"]) == "Hello"  # no tail is a prefix of "world"
    # the whole stop is never held back (it would have matched already): k < len(stop)
    assert visible_text("ab", ["ab"]) == "ab"
    assert visible_text("xa", ["ab", "xab"]) == ""  # "xa" is a prefix of "xab"
