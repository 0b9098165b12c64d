"""Which table-stream records invoke the editor: the filter of its event source mapping.

Plain data in Lambda's ``FilterCriteria`` pattern syntax (the EventBridge pattern subset), with
no aws-cdk: ``infra/construct.py`` puts these patterns on the editor's event source mapping, the
local stack reads them back from the synthesized template, and the benchmark applies them to its
stream records; both evaluate them with :func:`punctual.local.filters.passes`.

The editor acts on written task rows only. Not invoked for: removals, the meta (arming) row, and
Punctual's own claims (a MODIFY whose new image carries the send mark: the row is already on its
way). A user's put over a row drops the mark, so it still reaches the editor. Saves one
invocation record per task sent (invariant 7, docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Final

from .config import META_PK
from .models import ATTR_ENQUEUED_MS

_TASK_ROW: Final = {"pk": {"S": [{"anything-but": [META_PK]}]}}

# A record reaches the editor when it matches any of these. Treat as read-only.
EDITOR_STREAM_FILTERS: Final[tuple[dict[str, Any], ...]] = (
    {"eventName": ["INSERT"], "dynamodb": {"Keys": _TASK_ROW}},
    {"eventName": ["MODIFY"], "dynamodb": {"Keys": _TASK_ROW,
                                           "NewImage": {ATTR_ENQUEUED_MS: {"N": [{"exists": False}]}}}},
)
