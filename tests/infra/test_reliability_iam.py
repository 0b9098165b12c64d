"""IAM grants vs. the calls the handlers really make (issue 7, security; reuses the infra synth).

test_construct.py pins each role's grants; this closes the loop from the code side:
the operations each handler was seen to call (recorded with tests.faults.Faults over
the crash-matrix scenario, the hostile catalogue and a consumer-side rejection) must
all be granted, and every granted action must be one the code uses or one the
platform needs (logs, event source mappings, KMS).
"""

from __future__ import annotations

from tests.infra.test_construct import grants

BATCH_ALIASES = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
                 "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}
# A transaction is authorised by the actions of its items: the handlers' transactions hold conditional
# Deletes only (the consumer's store.delete_sent).
TRANSACT_ITEMS = {"TransactWriteItems": "DeleteItem"}
EVENTS_OPS = {"PutRule", "DisableRule", "EnableRule", "DescribeRule"}
SQS_OPS = {"SendMessage", "DeleteMessage", "ChangeMessageVisibility", "ReceiveMessage", "GetQueueAttributes"}
# granted for the platform, not called by the handler code
PLATFORM = {"logs:CreateLogStream", "logs:PutLogEvents",
            "sqs:ReceiveMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes", "sqs:DeleteMessage",
            "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}
# paths the recording scenarios do not walk, each checked to exist in the code
RARE = {"events:DisableRule": "punctual/core/arming.py",  # nothing pending any more
        "events:DescribeRule": "punctual/core/arming.py",  # editor: an arm already covers its rows
        "sqs:ChangeMessageVisibility": "punctual/core/usecases/consume.py"}  # a message visible far too early


def iam_action(op: str) -> str:
    op = TRANSACT_ITEMS.get(op, BATCH_ALIASES.get(op, op))
    if op in EVENTS_OPS:
        return f"events:{op}"
    if op in SQS_OPS:
        return f"sqs:{op}"
    return f"dynamodb:{op}"


def test_granted_actions_match_the_calls_the_handlers_make(demo):
    from pathlib import Path

    from tests.reliability.crashes import TARGETS, calls_by_handler, run_case

    calls = calls_by_handler()
    for t in TARGETS:
        calls[t] |= set(run_case(t, None).trace)
    s = demo.scheduler
    roles = {"poller": s.poller_function.role, "consumer": s.consumer_function.role, "editor": s.editor_function.role}
    repo = Path(__file__).resolve().parents[2]
    for target, role in roles.items():
        granted = {a for a, _ in grants(demo, role)}
        needed = {iam_action(op) for op in calls[target]}
        assert needed <= granted, f"{target} calls {sorted(needed - granted)} without a grant"
        unused = granted - needed - PLATFORM
        for action in sorted(unused):
            assert action in RARE, f"{target} is granted {action} but never calls it"
            op = action.split(":")[1]
            snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in op).lstrip("_")
            assert snake in (repo / RARE[action]).read_text(), (action, RARE[action])


def test_direct_delivery_grants_match_the_calls_its_poller_and_editor_make(direct):
    """delivery="direct": the poller and the editor, recorded over the crash-matrix scenario in direct
    delivery, call nothing they are not granted; and every grant is a call, the platform's, or a rare
    path checked to exist in the code: here also sns:Publish (a poll request when arming fails,
    ensure_poll.request_poll; the OnFailure destinations publish with the same grant). Nothing on a
    delay queue: the poller reads no backlog (usecases/poll.py)."""
    from pathlib import Path

    from punctual.core.config import Settings
    from tests.reliability.crashes import run_case

    rare = {**RARE, "sns:Publish": "punctual/core/usecases/ensure_poll.py"}
    repo = Path(__file__).resolve().parents[2]
    s = direct.scheduler
    for target, role in (("poller", s.poller_function.role), ("editor", s.editor_function.role)):
        calls = set(run_case(target, None, settings=Settings(send_workers=1, delivery="direct")).trace)
        granted = {a for a, _ in grants(direct, role)}
        needed = {"sns:Publish" if op == "Publish" else iam_action(op) for op in calls}
        assert needed <= granted, f"{target} calls {sorted(needed - granted)} without a grant"
        assert "sns:Publish" in granted and not any("GetQueueAttributes" in a for a in granted), target
        for action in sorted(granted - needed - PLATFORM):
            assert action in rare, f"{target} is granted {action} but never calls it"
            op = action.split(":")[1]
            snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in op).lstrip("_")
            assert snake in (repo / rare[action]).read_text(), (action, rare[action])
