"""DynamoDB attribute values <-> plain JSON (no boto3)."""

from __future__ import annotations

import base64
import json
import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.core.ddbjson import UnsupportedValue, from_plain, item_to_plain, to_plain
from punctual.core.models import dumps


@pytest.mark.parametrize(
    "av, plain",
    [
        ({"N": "42"}, 42),
        ({"N": "-7"}, -7),
        ({"N": "1.5"}, Decimal("1.5")),
        ({"N": "1.0"}, 1),
        ({"N": "1E+3"}, 1000),
        ({"N": "123456789012345678901234567890"}, 123456789012345678901234567890),
        ({"N": "0.1"}, Decimal("0.1")),
        ({"N": "3.1415926535897932384626433832795028841"}, Decimal("3.1415926535897932384626433832795028841")),
        ({"N": "123456789012345678.91"}, Decimal("123456789012345678.91")),
        ({"N": "-1.5E-7"}, Decimal("-1.5E-7")),
        ({"N": "1E+40"}, Decimal("1E+40")),
        ({"S": "x"}, "x"),
        ({"NULL": True}, None),
        ({"BOOL": False}, False),
        ({"BOOL": True}, True),
        ({"SS": ["b", "a", "c"]}, ["a", "b", "c"]),
        ({"NS": ["10", "2", "1.5"]}, [Decimal("1.5"), 2, 10]),
        ({"B": b"\x00\xff"}, base64.b64encode(b"\x00\xff").decode()),
        ({"B": "AP8="}, "AP8="),  # stream records carry base64 text already
        ({"BS": [b"b", b"a"]}, sorted([base64.b64encode(b"b").decode(), base64.b64encode(b"a").decode()])),
        ({"L": [{"N": "1"}, {"S": "a"}, {"NULL": True}]}, [1, "a", None]),
        ({"M": {"a": {"M": {"b": {"L": [{"N": "2.25"}]}}}}}, {"a": {"b": [Decimal("2.25")]}}),
    ],
)
def test_to_plain(av, plain):
    got = to_plain(av)
    assert got == plain
    assert type(got) is type(plain)
    if isinstance(plain, list):
        assert [type(x) for x in got] == [type(x) for x in plain]


def test_a_number_keeps_every_digit_of_the_rows_text():
    """Invariant 9: what a float would round (17 digits) comes back whole (DynamoDB keeps 38)."""
    for text in ("3.1415926535897932384626433832795028841", "123456789012345678.91", "-0.000000000000000000001",
                 "9.9999999999999999999999999999999999999E+125", "1E-130"):
        assert str(to_plain({"N": text})) == str(Decimal(text))
    assert to_plain({"N": "12345678901234567890123456789012345678"}) == 12345678901234567890123456789012345678


@pytest.mark.parametrize("av", [{"N": "NaN"}, {"N": "Infinity"}, {"N": "-inf"}, {"N": "abc"}, {"N": "1E+400"},
                                {"X": 1}, {"S": "a", "N": "1"}, "S", None, {"NS": ["1", "NaN"]}])
def test_to_plain_rejects(av):
    with pytest.raises(UnsupportedValue):
        to_plain(av)


def test_item_to_plain():
    assert item_to_plain({"pk": {"S": "p"}, "n": {"N": "3"}}) == {"pk": "p", "n": 3}


def test_from_plain_types():
    assert from_plain(None) == {"NULL": True}
    assert from_plain(True) == {"BOOL": True}
    assert from_plain(3) == {"N": "3"}
    assert from_plain(Decimal("1.25")) == {"N": "1.25"}
    assert from_plain(b"\x01") == {"B": b"\x01"}
    assert from_plain((1, "a")) == {"L": [{"N": "1"}, {"S": "a"}]}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, Decimal("NaN"), Decimal("Infinity"), {1: "a"},
                                 {"a": {1, 2}}, object()])
def test_from_plain_rejects(bad):
    with pytest.raises(UnsupportedValue):
        from_plain(bad)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda f: abs(f) < 1e120 and
                                                                            (f == 0 or abs(f) > 1e-120))
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_from_plain_round_trip(value):
    # a float comes back as the Decimal of its shortest text, the number a JSON reader gets again
    assert json.loads(dumps(to_plain(from_plain(value)))) == value


@settings(max_examples=200, deadline=None)
@given(value=st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
    lambda d: d == 0 or Decimal("1E-130") <= abs(d) < Decimal("1E+126")))
def test_a_decimal_round_trips_exactly(value):
    back = to_plain(from_plain(value))
    assert back == value and (isinstance(back, int) or str(back) == str(value))
