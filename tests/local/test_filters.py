import json

from punctual.core.config import META_PK
from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS
from punctual.core.stream_filter import EDITOR_STREAM_FILTERS
from punctual.local.filters import matches, passes, sqs_view

MARK = {ATTR_ENQUEUED_MS: {"N": "1798761500000"}, ATTR_ATTEMPT: {"N": "1"}}


def rec(name, pk="scheduler", new=None, old=None):
    """A NEW_AND_OLD_IMAGES stream record as Lambda hands it over (images absent as on REMOVE/INSERT)."""
    keys = {"pk": {"S": pk}, "sk": {"S": "1798761600000#a"}}
    ddb = {"Keys": keys, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    if new is not None:
        ddb["NewImage"] = {**keys, "payload": {"S": "{}"}, **new}
    if old is not None:
        ddb["OldImage"] = {**keys, "payload": {"S": "{}"}, **old}
    return {"eventName": name, "eventSource": "aws:dynamodb", "dynamodb": ddb}


def editor_gets(record):
    return passes(EDITOR_STREAM_FILTERS, record)


def test_the_editor_gets_user_writes_of_task_rows():
    assert editor_gets(rec("INSERT", new={}))
    assert editor_gets(rec("MODIFY", new={}, old={}))  # a user's put over a row
    assert editor_gets(rec("MODIFY", new={}, old=MARK))  # a put over a claimed row drops the mark; a release


def test_the_editor_never_gets_removals_the_meta_row_or_punctuals_claims():
    assert not editor_gets(rec("REMOVE", old={}))
    assert not editor_gets(rec("REMOVE", old=MARK))
    assert not editor_gets(rec("MODIFY", new=MARK, old={}))  # the claim
    assert not editor_gets(rec("MODIFY", new=MARK, old=MARK))  # a re-claim (attempt + 1)
    assert not editor_gets(rec("INSERT", pk=META_PK, new={}))
    assert not editor_gets(rec("MODIFY", pk=META_PK, new={}, old={}))
    assert not editor_gets(rec("REMOVE", pk=META_PK, old={}))


def test_no_patterns_pass_everything():
    assert passes([], rec("REMOVE", old={}))


def test_exists_false_under_an_absent_parent():
    """Lambda matches flattened leaf paths: a leaf under a missing (or non-object) parent is absent."""
    assert matches({"a": {"b": [{"exists": False}]}}, {})
    assert matches({"a": {"b": [{"exists": False}]}}, {"a": "scalar"})
    assert not matches({"a": {"b": [{"exists": True}]}}, {})
    assert not matches({"a": {"b": ["c"]}}, {})


def test_operators():
    assert matches({"a": [{"prefix": "ab"}]}, {"a": "abc"})
    assert not matches({"a": [{"prefix": "ab"}]}, {"a": "xbc"})
    assert matches({"a": [{"suffix": "bc"}]}, {"a": "abc"})
    assert matches({"a": [{"exists": False}]}, {"b": 1})
    assert not matches({"a": [{"exists": True}]}, {"b": 1})
    assert matches({"a": [{"numeric": [">", 1, "<=", 5]}]}, {"a": 5})
    assert not matches({"a": [{"numeric": [">", 1, "<=", 5]}]}, {"a": 6})
    assert matches({"a": [1, 2]}, {"a": [3, 2]})
    assert matches({"a": [{"anything-but": {"prefix": "x"}}]}, {"a": "yz"})
    assert matches({"a": [{"equals-ignore-case": "AbC"}]}, {"a": "abc"})
    assert not matches({"a": {"b": ["c"]}}, {"a": "c"})


def test_sqs_bodies_match_as_json():
    record = {"body": json.dumps({"kind": "x"}), "messageId": "1"}
    assert passes([{"body": {"kind": ["x"]}}], sqs_view(record))
    assert not passes([{"body": {"kind": ["y"]}}], sqs_view(record))
    assert sqs_view({"body": "not json"}) == {"body": "not json"}
