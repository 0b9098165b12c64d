"""Runnable example of the Punctual client against moto (no AWS account needed).

    python examples/client_moto.py
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from punctual import AlreadyExists, NotFound, PunctualClient  # noqa: E402


def main() -> None:
    with mock_aws():
        ddb = boto3.client("dynamodb")
        ddb.create_table(  # what the Scheduler construct creates
            TableName="punctual",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                  {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        client = PunctualClient("punctual", ddb=ddb)  # partition_key_value defaults to "scheduler"

        now = datetime.now(UTC)
        task = client.schedule(now + timedelta(minutes=10), {"order": 42, "action": "remind"})
        print("scheduled", task.key, "due", task.due_iso)

        client.schedule_many([(now + timedelta(hours=h), {"hour": h}) for h in range(1, 31)])
        try:
            client.schedule(task.due_ms, {"again": True}, id=task.id)
        except AlreadyExists as exc:
            print("refused:", exc)

        moved = client.reschedule(task.key, now + timedelta(days=1))
        print("moved to", moved.due_iso, "same id:", moved.id == task.id)

        first_day = list(client.list(start=now, end=now + timedelta(hours=12)))
        print(len(first_day), "tasks due in the next 12 h; first:", first_day[0].payload)

        client.cancel(moved)
        try:
            client.get(moved.key)
        except NotFound:
            print("cancelled", moved.key)


if __name__ == "__main__":
    main()
