"""event_id from a second language: the README's Node.js block computes the same ids as the Python
code, for the README's golden value and for sharded, non-ASCII and NUL-bearing keys."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from punctual.core.models import event_id

README = Path(__file__).resolve().parents[2] / "README.md"
GOLDEN = ("scheduler", "1798135200000#order-42", "f2ada993-134e-585e-a7f7-c1aed7535a57")
CASES = [
    GOLDEN[:2],
    ("scheduler#2", "1798135200000#order-42"),  # a shard's partition value
    ("jobs", "4102444799999#é€😀"),  # non-ASCII: the name is UTF-8
    ("scheduler", "1798135200000#a\u0000b"),
    ("", ""),
]


def readme_node_block() -> str:
    text = README.read_text()
    start = text.index("In Node.js")
    return re.search(r"```js\n(.*?)```", text[start:], re.S).group(1)


def test_the_readme_states_the_golden_value_the_code_computes():
    pk, sk, expected = GOLDEN
    assert event_id(pk, sk) == expected
    text = README.read_text()
    assert f"`{pk}`" in text and f"`{sk}`" in text and f"`{expected}`" in text
    assert '"event_id": "f2ada993-134e-585e-a7f7-c1aed7535a57"' in text  # the example event


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_nodes_event_id_is_the_pythons():
    script = readme_node_block() + f"\nconsole.log(JSON.stringify({json.dumps(CASES)}.map(([p, s]) => eventId(p, s))));\n"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=60).stdout
    assert json.loads(out) == [event_id(pk, sk) for pk, sk in CASES]
    assert json.loads(out)[0] == GOLDEN[2]
