import json

import pytest

from promptcache.prompt.canonical import (
    canonical_json,
    dumps_sorted,
    normalize_text,
    sort_keys_deep,
)


def test_rfc8785_example_from_the_rfc():
    # RFC 8785 section 3.2.3: the sample input and its canonical output, verbatim.
    src = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,'
        '1e-27],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(json.loads(src)) == expected.encode("utf-8")


def test_canonical_json_ignores_dict_order_and_tuples():
    a = {"b": [1, (2, 3)], "a": {"y": 1, "x": 2}}
    b = {"a": {"x": 2, "y": 1}, "b": [1, [2, 3]]}
    assert canonical_json(a) == canonical_json(b) == b'{"a":{"x":2,"y":1},"b":[1,[2,3]]}'


def test_canonical_json_rejects_non_json_with_path():
    with pytest.raises(TypeError, match=r"\$\.a\[1\]"):
        canonical_json({"a": [1, object()]})
    with pytest.raises(ValueError):
        canonical_json({"a": float("nan")})


def test_sort_keys_deep_orders_every_level_and_keeps_lists():
    v = {"z": {"b": 1, "a": [{"d": 1, "c": 2}]}, "a": 0}
    out = sort_keys_deep(v)
    assert json.dumps(out) == '{"a": 0, "z": {"a": [{"c": 2, "d": 1}], "b": 1}}'


def test_dumps_sorted_separators_and_unicode():
    assert dumps_sorted({"b": "é", "a": [1, 2]}) == '{"a":[1,2],"b":"é"}'


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("a\r\nb\rc", "a\nb\nc"),
        ("line  \t\nnext   \n\n\n", "line\nnext"),
        ("  indented\n    kept", "  indented\n    kept"),
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected
