"""The wire serializer (punctual/core/wire.py): json.dumps's compact sorted text, Decimals exact."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.core.wire import _text, dumps

OPTIONS = {"separators": (",", ":"), "ensure_ascii": False, "sort_keys": True}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_without_decimals_the_text_is_json_dumps(value):
    assert dumps(value) == json.dumps(value, **OPTIONS)
    assert _text(value) == json.dumps(value, **OPTIONS)  # the path for values holding a Decimal


@settings(max_examples=300, deadline=None)
@given(value=json_values, number=st.decimals(allow_nan=False, allow_infinity=False))
def test_a_decimal_is_written_as_a_number_with_all_its_digits(value, number):
    text = dumps({"d": number, "v": value})
    back = json.loads(text, parse_float=Decimal)
    assert str(back["d"]) == str(number) or back["d"] == number  # an integral Decimal reads back as int
    assert text == '{"d":' + str(number) + ',"v":' + json.dumps(value, **OPTIONS) + "}"


def test_exact_numbers_in_maps_lists_and_tuples():
    value = {"b": [Decimal("3.1415926535897932384626433832795028841"), (Decimal("-1.5E-7"), 1)],
             "a": {"x": Decimal("123456789012345678.91"), "é": None, "2": True}}
    assert dumps(value) == ('{"a":{"2":true,"x":123456789012345678.91,"é":null},'
                            '"b":[3.1415926535897932384626433832795028841,[-1.5E-7,1]]}')
    assert dumps({10: Decimal("0.5"), 9: 1}) == json.dumps({10: 0.5, 9: 1}, **OPTIONS) == '{"9":1,"10":0.5}'


@pytest.mark.parametrize("bad", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
def test_a_non_finite_decimal_has_no_json_form(bad):
    with pytest.raises(ValueError):
        dumps({"n": bad})


def test_what_json_refuses_is_refused():
    with pytest.raises(TypeError):
        dumps({"s": {1, 2}})
    with pytest.raises(TypeError):
        dumps({"d": Decimal(1), "s": object()})
