"""A stream record the editor keeps failing on: Lambda gives up on it after MaximumRetryAttempts
(punctual.lambda_events.stream_after_failure), the records after it go on, and the poller still
delivers its task (the stream is a fast path; the row is the truth: never lost)."""

from __future__ import annotations

from typing import Any

from punctual.core.keys import encode_sk
from punctual.core.runtime import Deps
from punctual.core.usecases.process_stream import process_stream
from tests.reliability.crashes import START, environment, put_row

DUES = {"before": START + 2_000, "poison": START + 3_000, "after": START + 4_000}


def test_a_record_failing_every_retry_is_given_up_alone_and_its_task_still_delivered() -> None:
    with environment("fake") as (world, _):
        poison_sk = encode_sk(DUES["poison"], "poison")
        attempts_on_poison = []

        def editor(event: dict[str, Any], deps: Deps) -> Any:
            records = event["Records"]
            keys = [r["dynamodb"]["Keys"]["sk"]["S"] for r in records]
            if poison_sk not in keys:
                return process_stream(event, deps)
            attempts_on_poison.append(len(records))
            i = keys.index(poison_sk)
            done = process_stream({"Records": records[:i]}, deps) if i else {"batchItemFailures": []}
            failed = [*done["batchItemFailures"], {"itemIdentifier": records[i]["dynamodb"]["SequenceNumber"]}]
            return {"batchItemFailures": failed}

        world.editor = editor
        for name, due in DUES.items():
            put_row(world, encode_sk(due, name), {"task": name})
        world.run_until(START + 3_600_000, stop=world.idle)

        out = world.outcome({encode_sk(due, name): due for name, due in DUES.items()})
        assert (out.lost, out.early, out.duplicates, out.unexpected) == ([], [], 0, [])
        # the whole batch first, then every retry from the checkpoint: poison and "after"
        assert attempts_on_poison == [3] + [2] * world.max_stream_retries
        dropped = [e for e in out.errors if "dropped" in e]
        assert len(dropped) == 1 and "poison" in dropped[0]  # it alone, not the record after it
        sent = {d.event["id"]: d.sent_ms - d.event["due_ms"] for d in out.deliveries}
        assert sent["after"] < 1_000  # the editor went on with it: on time, not left to the poller
        assert sent["poison"] > 60_000  # the poller's next window delivered it, late but not lost
        assert world.idle()
