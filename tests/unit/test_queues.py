"""send_all with a fake SQS client: batching by 10, ids, partial failures, throttling."""

from __future__ import annotations

from punctual.core.clock import ManualClock
from punctual.core.queues import Outgoing, send_all


class ClientError(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.response = {"Error": {"Code": code, "Message": "x"}}


class FakeSqs:
    def __init__(self, script):
        self.script = list(script)  # per call: an exception, or {body: (sender_fault, code)} failures
        self.delivered: list[str] = []
        self.calls: list[list[dict]] = []

    def send_message_batch(self, QueueUrl, Entries):  # noqa: N803
        assert len(Entries) <= 10 and len({e["Id"] for e in Entries}) == len(Entries)
        self.calls.append(Entries)
        step = self.script.pop(0) if self.script else {}
        if isinstance(step, Exception):
            raise step
        failed = [{"Id": e["Id"], "SenderFault": step[e["MessageBody"]][0], "Code": step[e["MessageBody"]][1]}
                  for e in Entries if e["MessageBody"] in step]
        self.delivered += [e["MessageBody"] for e in Entries if e["MessageBody"] not in step]
        return {"Successful": [], "Failed": failed}


def msgs(n):
    return [Outgoing(ref=i, body=f"m{i}", delay_seconds=i % 901) for i in range(n)]


def test_batches_of_ten_and_delays():
    sqs = FakeSqs([])
    assert send_all(sqs, "q", msgs(25), ManualClock(0)) == []
    assert [len(c) for c in sqs.calls] == [10, 10, 5]
    assert sorted(sqs.delivered) == sorted(f"m{i}" for i in range(25))
    assert sqs.calls[1][3]["DelaySeconds"] == 13


def test_retryable_entries_retried_sender_faults_returned():
    clock = ManualClock(0)
    sqs = FakeSqs([{"m1": (False, "InternalError"), "m2": (True, "InvalidParameterValue")},
                   {"m1": (False, "InternalError")}])
    failed = send_all(sqs, "q", msgs(5), clock)
    assert [(f.ref, f.code) for f in failed] == [(2, "InvalidParameterValue")]
    assert sorted(sqs.delivered) == ["m0", "m1", "m3", "m4"]
    assert [len(c) for c in sqs.calls] == [5, 1, 1]
    assert clock.slept_ms > 0  # backed off


def test_throttled_call_retried_then_given_up():
    clock = ManualClock(0)
    sqs = FakeSqs([ClientError("ThrottlingException")] * 2)
    assert send_all(sqs, "q", msgs(3), clock) == []
    sqs = FakeSqs([ClientError("ThrottlingException")] * 10)
    failed = send_all(sqs, "q", msgs(3), clock, attempts=3)
    assert [f.ref for f in failed] == [0, 1, 2] and len(sqs.calls) == 3
    sqs = FakeSqs([ClientError("AccessDenied")])
    assert [f.code for f in send_all(sqs, "q", msgs(2), clock)] == ["AccessDenied"] * 2


def test_delay_recomputed_at_send_time():
    clock = ManualClock(0)
    sqs = FakeSqs([{"m0": (False, "InternalError")}])
    send_all(sqs, "q", msgs(1), clock, delay_for=lambda o: 100 - clock.now_ms() // 1000)
    assert sqs.calls[0][0]["DelaySeconds"] == 100
    assert sqs.calls[1][0]["DelaySeconds"] <= 100
