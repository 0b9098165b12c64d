import json

from punctual.local.filters import matches, passes, sqs_view

EDITOR = [
    json.loads('{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"anything-but":["__punctual__"]}]}}}}'),
    json.loads('{"eventName":["MODIFY"],"dynamodb":{"Keys":{"pk":{"S":[{"anything-but":["__punctual__"]}]}}}}'),
]


def rec(name, pk):
    return {"eventName": name, "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": "x"}}}}


def test_the_editor_filters_of_the_construct():
    assert passes(EDITOR, rec("INSERT", "scheduler"))
    assert passes(EDITOR, rec("MODIFY", "scheduler"))
    assert not passes(EDITOR, rec("REMOVE", "scheduler"))
    assert not passes(EDITOR, rec("INSERT", "__punctual__"))
    assert passes([], rec("REMOVE", "x"))


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
