"""The consumer's metrics reach CloudWatch for its largest invocation: 1,000 rows (consumer_max_rows), whose lateness values
arrive in EMF records the specification accepts, in the namespace and dimension the alarm reads.
(On the in-memory AWS: the same handler code; moto takes ~90 s for 1,000 rows.)"""

from __future__ import annotations

from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from punctual.core.metrics_names import DELIVERED, INSTANCE_DIMENSION, LATENESS_MS
from punctual.core.models import DelayGroup
from punctual.core.runtime import Deps
from punctual.core.usecases.consume import consume
from tests.reliability.fakeaws import GatedAws
from tests.unit.test_observability import assert_valid_emf, values_of

T0_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z


def test_the_lateness_alarm_sees_every_row_of_a_1000_row_group(emf_records):
    # GIVEN the most rows one invocation delivers (consumer_max_rows: 1,000), due on the same ms, in
    # one message (an invocation always keeps its first message whatever its size)
    clock = ManualClock(T0_MS - 500)
    aws = GatedAws(clock=clock)
    s = Settings(table_name=aws.table_name, delay_queue_url="delay", delivery_queue_url="delivery",
                 rejected_queue_url="rejected", instance_name="orders", metrics_namespace="Acme")
    deps = Deps(settings=s, clock=clock, ddb=aws.ddb, sqs=aws.sqs, events=aws.events)
    sks = [encode_sk(T0_MS, f"r{i:04}") for i in range(s.consumer_max_rows)]
    for sk in sks:
        aws.ddb.put_item(TableName=s.table_name, Item={"pk": {"S": "scheduler"}, "sk": {"S": sk},
                                                       "payload": {"M": {}}, "punctual_attempt": {"N": "1"},
                                                       "punctual_enqueued_ms": {"N": str(clock.now_ms())}})
    body = DelayGroup.body_of("scheduler", [(sk, T0_MS, 1) for sk in sks], clock.now_ms())
    event = {"Records": [{"messageId": "m1", "receiptHandle": "h1", "body": body,
                          "attributes": {"ApproximateReceiveCount": "1"},
                          "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:delay"}]}
    # WHEN the consumer delivers it
    assert consume(event, deps) == {"batchItemFailures": []}
    assert len(aws.queue("delivery")) == s.consumer_max_rows == 1000
    # THEN every EMF record is within the specification's limits (CloudWatch drops a record with a
    # 1,000-value array), each in the alarm's namespace and Instance dimension, and together they
    # carry all 1,000 lateness values
    out = emf_records()
    for rec in out:
        assert_valid_emf(rec)
        (directive,) = rec["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "Acme" and directive["Dimensions"] == [[INSTANCE_DIMENSION]]
        assert rec[INSTANCE_DIMENSION] == "orders"
    assert len(values_of(out, LATENESS_MS)) == 1000
    assert sum(values_of(out, DELIVERED)) == 1000
