"""Sort keys: ``<13-digit ms>#<id>`` round trip and every rejection with its code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.core.keys import (
    MAX_DUE_MS,
    InvalidKey,
    after_window_key,
    decode_sk,
    encode_sk,
    validate_id,
    window_upper_key,
)


def test_encode_pads_to_13_digits():
    assert encode_sk(1733000000000, "a") == "1733000000000#a"
    assert encode_sk(5, "x") == "0000000000005#x"


def test_round_trip_keeps_hashes_in_id():
    key = decode_sk(encode_sk(1798761600123, "order#42"))
    assert (key.due_ms, key.id) == (1798761600123, "order#42")
    assert key.sk == "1798761600123#order#42"


@pytest.mark.parametrize(
    "sk, code",
    [
        ("1798761600#abc", "seconds_not_ms"),
        ("2027-01-01T00:00:00Z#abc", "iso_string"),
        ("2027-01-01 00:00:00#abc", "iso_string"),
        ("1798761600000", "missing_id"),
        ("1798761600000#", "missing_id"),
        ("-1798761600000#abc", "negative"),
        (f"{MAX_DUE_MS}#abc", "year_out_of_range"),
        ("9999999999999#abc", "year_out_of_range"),
        ("1798761600000#a\x00b", "bad_id"),
        ("1798761600000#a\nb", "bad_id"),
        ("1798761600000#a\x7fb", "bad_id"),
        ("1798761600000#a\u2028b", "bad_id"),
        ("17987616000000#abc", "malformed"),
        ("179876160000#abc", "malformed"),
        ("abc#def", "malformed"),
        ("1798761600000abc", "malformed"),
        ("", "malformed"),
        (b"1798761600000#abc", "not_a_string"),
        (1798761600000, "not_a_string"),
        (None, "not_a_string"),
    ],
)
def test_rejections_carry_the_rule_broken(sk, code):
    with pytest.raises(InvalidKey) as info:
        decode_sk(sk)
    assert info.value.code == code
    assert info.value.reason


def test_last_valid_millisecond_of_2199():
    assert decode_sk(f"{MAX_DUE_MS - 1}#x").due_ms == MAX_DUE_MS - 1


@pytest.mark.parametrize(
    "due, task_id, code",
    [
        (-1, "x", "negative"),
        (MAX_DUE_MS, "x", "year_out_of_range"),
        (1.5, "x", "bad_time"),
        (True, "x", "bad_time"),
        ("1798761600000", "x", "bad_time"),
        (1798761600000, "", "missing_id"),
        (1798761600000, None, "bad_id"),
        (1798761600000, 7, "bad_id"),
        (1798761600000, "a\tb", "bad_id"),
        (1798761600000, "x" * 513, "bad_id"),
        (1798761600000, "é" * 506, "bad_id"),  # 1012 UTF-8 bytes
    ],
)
def test_encode_rejects(due, task_id, code):
    with pytest.raises(InvalidKey) as info:
        encode_sk(due, task_id)
    assert info.value.code == code


def test_window_bounds_order():
    end = 1798761600000
    upper = window_upper_key(end)
    assert encode_sk(end, "\U0010fff0") < upper  # anything due at end is inside
    assert encode_sk(end + 1, "!") > upper  # the next millisecond is outside
    assert after_window_key(end) <= encode_sk(end + 1, "!")
    assert after_window_key(end) > encode_sk(end, "\U0010fff0")


valid_ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Cn"), blacklist_characters="\u2028\u2029"),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(due=st.integers(min_value=0, max_value=MAX_DUE_MS - 1), task_id=valid_ids)
def test_round_trip_property(due, task_id):
    sk = encode_sk(due, task_id)
    assert len(sk.partition("#")[0]) == 13
    key = decode_sk(sk)
    assert (key.due_ms, key.id) == (due, task_id)
    assert validate_id(task_id) == task_id


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, MAX_DUE_MS - 1), b=st.integers(0, MAX_DUE_MS - 1), ia=valid_ids, ib=valid_ids)
def test_keys_sort_by_time(a, b, ia, ib):
    if a < b:
        assert encode_sk(a, ia) < encode_sk(b, ib)
