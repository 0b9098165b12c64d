"""README's list of rejection codes names every code a row can be rejected with (a row due in year
2300 was rejected as `malformed`, a code the list did not name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from punctual.core.keys import InvalidKey, decode_sk

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# where rows are validated and rejected: the sort key, the row, and the sends used up
SOURCES = ("punctual/core/keys.py", "punctual/core/models.py", "punctual/core/planning.py")
# validate_due_ms's code for a due time that is not an int: only the Python client's (decode_sk always
# gives it one), documented with the client's other InvalidSchedule codes in docs/client.md
CLIENT_ONLY = {"bad_time"}


def readme_codes() -> set[str]:
    paragraph = README[README.index("Rejected, with a reason code in the rejected-rows queue"):].split("\n\n")[0]
    return set(re.findall(r"`([a-z_]+)`", paragraph))


def row_codes() -> set[str]:
    text = "".join((ROOT / path).read_text() for path in SOURCES)
    return set(re.findall(r'(?:RowRejected|InvalidKey)\("([a-z_]+)"', text)) - CLIENT_ONLY


def test_every_rejection_code_is_named_in_the_readme():
    assert row_codes() >= {"malformed", "year_out_of_range", "seconds_not_ms", "oversize", "undeliverable"}
    assert row_codes() <= readme_codes()


@pytest.mark.parametrize("sk, code", [
    ("10413792000000#y2300", "malformed"),  # 2300-01-01: 14 digits
    ("9999999999999#y2286", "year_out_of_range"),  # the last 13-digit ms, 2286-11-20
    ("7258118400000#y2200", "year_out_of_range"),  # 2200-01-01
])
def test_the_readmes_account_of_far_future_rows(sk, code):
    with pytest.raises(InvalidKey) as rejected:
        decode_sk(sk)
    assert rejected.value.code == code
    assert "a row due in 2300 is `malformed`" in " ".join(README.split())
