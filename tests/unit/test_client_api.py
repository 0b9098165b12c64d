"""The client's public API: the names it has always exported, and the signatures docs/client.md
documents (issue 43 split the client into a package; neither moved)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import punctual
import punctual.client

ROOT = Path(__file__).resolve().parents[2]

# the public names punctual/client.py defined before the split, and the errors it imported
CLIENT_NAMES = ["PunctualClient", "ScheduledTask", "RedriveLeft", "RedriveReport", "When", "to_due_ms",
                "task_key", "BATCH_WRITE", "REDRIVE_VISIBILITY_S", "MIN_PLAUSIBLE_MS"]
ERRORS = ["AlreadyDelivered", "AlreadyEnqueued", "AlreadyExists", "InvalidSchedule", "NotFound", "PartialWrite",
          "PunctualError"]


@pytest.mark.parametrize("name", CLIENT_NAMES + ERRORS)
def test_every_name_of_the_client_module_is_still_importable(name):
    assert getattr(punctual.client, name) is not None
    assert (name in punctual.client.__all__) == (name in CLIENT_NAMES)  # the errors' home: punctual.errors
    if name in punctual.__all__:
        assert getattr(punctual, name) is getattr(punctual.client, name)


def _rendered(callable_: object) -> str:
    """``name(a, b=1, *, c=None)`` as docs/client.md writes a signature (strings in double quotes)."""
    params, star = [], False
    for p in list(inspect.signature(callable_).parameters.values())[1:]:  # without self
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        params.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}".replace("'", '"'))
    return f"({', '.join(params)})"


def _documented() -> dict[str, str]:
    """docs/client.md's methods table and constructor line: name -> ``(parameters)``."""
    text = (ROOT / "docs" / "client.md").read_text()
    found = {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)(\(.*?\))` \|", text, re.MULTILINE)}
    constructor = re.search(r"^`PunctualClient(\(.*\))`$", text, re.MULTILINE)
    assert constructor is not None
    found["__init__"] = constructor[1]
    return found


def test_docs_client_md_documents_every_method_with_its_signature():
    documented = _documented()
    public = {n for n, v in inspect.getmembers(punctual.client.PunctualClient, inspect.isfunction)
              if not n.startswith("_")}
    # every public method is in the table but build_item (the row a task would be; its docstring)
    assert set(documented) - {"__init__"} == public - {"build_item"}
    for name, params in documented.items():
        assert _rendered(getattr(punctual.client.PunctualClient, name)) == params, name
