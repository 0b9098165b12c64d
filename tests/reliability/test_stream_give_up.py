"""A stream record the editor keeps failing on: Lambda gives up on it after MaximumRetryAttempts
(punctual.lambda_events.stream_after_failure), the records after it go on, and its OnFailure
record reaches the delay queue, whose consumer arms a poll for the next minute: the task is
delivered at most 2 minutes after the give-up, also when nothing else is pending (issue 28; it was
352 s to hours late, and never while nothing else was pending)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from punctual.core.keys import encode_sk
from punctual.core.runtime import Deps
from punctual.core.usecases.process_stream import process_stream
from tests.reliability.crashes import START, environment, put_row

DUES = {"before": START + 2_000, "poison": START + 3_000, "after": START + 4_000}


def _run(world: Any, editor: Any) -> Any:
    """The scenario's three rows through ``editor``, until nothing is pending; nothing lost, early or
    duplicated."""
    world.editor = editor
    for name, due in DUES.items():
        put_row(world, encode_sk(due, name), {"task": name})
    world.run_until(START + 3_600_000, stop=world.idle)
    out = world.outcome({encode_sk(due, name): due for name, due in DUES.items()})
    assert (out.lost, out.early, out.duplicates, out.unexpected) == ([], [], 0, [])
    return out


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

        out = _run(world, editor)
        # the whole batch first, then every retry from the checkpoint: poison and "after"
        assert attempts_on_poison == [3] + [2] * world.max_stream_retries
        dropped = [e for e in out.errors if "dropped" in e]
        assert len(dropped) == 1 and "poison" in dropped[0]  # it alone, not the record after it
        sent = {d.event["id"]: d.sent_ms - d.event["due_ms"] for d in out.deliveries}
        assert sent["after"] < 1_000  # the editor went on with it: on time, not left to the poller
        (notice,) = world.log.failure_notices
        assert notice["DDBStreamBatchInfo"]["batchSize"] == 1
        given_up = max(DUES["poison"], START)  # the retries take milliseconds here
        poison = next(d for d in out.deliveries if d.event["id"] == "poison")
        assert 0 <= poison.sent_ms - given_up <= 2 * 60_000, sent
        assert world.idle()


def test_a_poison_record_alone_in_the_system_is_still_delivered_soon() -> None:
    """Nothing else pending: no poll armed by anyone else (before issue 28: never delivered until
    an unrelated insert). A poisoned record due in an hour is delivered on time."""
    with environment("fake") as (world, _):
        sks = {encode_sk(START + 3_000, "now"), encode_sk(START + 3_600_000, "later")}

        def editor(event: dict[str, Any], deps: Deps) -> Any:
            return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}
                                          for r in event["Records"] if r["dynamodb"]["Keys"]["sk"]["S"] in sks]}

        world.editor = editor
        for key in sks:
            put_row(world, key, {"task": key})
        world.run_until(START + 3 * 3_600_000, stop=world.idle)
        out = world.outcome({key: int(key.split("#")[0]) for key in sks})
        assert (out.lost, out.early, out.duplicates) == ([], [], 0)
        late = {d.event["id"]: d.sent_ms - d.event["due_ms"] for d in out.deliveries}
        assert late["now"] <= 2 * 60_000 and late["later"] < 1_000, late


def test_a_record_whose_attempts_time_out_holds_the_rows_behind_it_about_a_minute() -> None:
    """Every invocation that carries the poisoned record runs into the editor's timeout (20 s,
    punctual/deployment.py) and fails; Lambda bisects the batch (the innocent record before it goes
    on) and retries the poisoned one, until it is older than MaximumRecordAgeInSeconds (60 s): then it
    and the records behind it that have waited as long are discarded to the OnFailure destination,
    the delay queue, whose consumer arms a poll that delivers them. So no record waits in the lane
    more than ~a minute plus one attempt (issue 28: ~11 min with 10 retries of a 60 s timeout), and
    every task comes at most 2 minutes after its record was given up on."""
    from punctual.deployment import EDITOR_MAX_RECORD_AGE_S, EDITOR_TIMEOUT_S

    with environment("fake") as (world, _):
        poison_sk = encode_sk(DUES["poison"], "poison")
        attempts = []

        def editor(event: dict[str, Any], deps: Deps) -> Any:
            if poison_sk in [r["dynamodb"]["Keys"]["sk"]["S"] for r in event["Records"]]:
                attempts.append(len(event["Records"]))
                deps.clock.sleep_ms(EDITOR_TIMEOUT_S * 1000)
                raise TimeoutError("Task timed out after 20.00 seconds")
            return process_stream(event, deps)

        out = _run(world, editor)
        assert attempts == [3, 2, 1]  # the batch, its half with the poison, the poison alone: 60 s
        notices = [int(datetime.fromisoformat(n["timestamp"]).timestamp() * 1000) for n in world.log.failure_notices]
        held = max(notices) - START  # the stream got the records at START
        assert held <= (EDITOR_MAX_RECORD_AGE_S + EDITOR_TIMEOUT_S) * 1000, held
        dropped = sorted(e.split("#")[-1].split("'")[0] for e in out.errors if "dropped" in e)
        assert dropped == ["after", "poison"]  # "before" was bisected out and went by the fast path
        sent = {d.event["id"]: d.sent_ms for d in out.deliveries}
        assert all(t <= max(notices) + 2 * 60_000 for t in sent.values()), (sent, notices)
