"""The CloudFormation template the local stack is built from: the construct, synthesized.

The local stack never keeps its own list of resources: it synthesizes
``punctual.cdk.Scheduler`` (the repository's ``infra/``) in a bare stack (no bundling, so no Docker and no pip) and
walks the template (see :mod:`punctual.local.provision`). Synthesis takes seconds
(node + jsii), so the result is cached under a key made of the construct's
sources, the function settings module and the aws-cdk-lib version.

Run as a module to synthesize into a file: ``python -m punctual.local.template OUT.json``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

STACK_NAME = "PunctualLocal"
CONSTRUCT_ID = "Scheduler"


class TemplateError(RuntimeError):
    pass


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return None  # absent, or a bare namespace directory
    return Path(next(iter(spec.submodule_search_locations)))


def _sources_key(props: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(props, sort_keys=True).encode())
    for pkg in ("punctual.cdk", "punctual.core"):
        root = _package_dir(pkg)
        if root is None:
            raise TemplateError(
                f"the CDK construct (package {pkg!r}, extra 'cdk') is not importable: cannot synthesize; "
                "pass --template FILE"
            )
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    for dist in ("aws-cdk-lib",):
        try:
            h.update(importlib.metadata.version(dist).encode())
        except importlib.metadata.PackageNotFoundError:
            pass
    return h.hexdigest()[:16]


def construct_kwargs(props: dict[str, Any]) -> dict[str, Any]:
    """The construct's keyword arguments from JSON props: a Duration prop is given as a number of
    seconds (``{"window": 300}``) or an ISO-8601 duration (``{"window": "PT5M"}``)."""
    from aws_cdk import Duration

    from punctual.cdk.construct import DURATION_PROPS

    def value(name: str, v: Any) -> Any:
        if name not in DURATION_PROPS:
            return v
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise ValueError(f"{name}: a number of seconds or an ISO-8601 duration (PT5M), got {v!r}")
        return Duration.parse(v) if isinstance(v, str) else Duration.seconds(v)

    return {name: value(name, v) for name, v in props.items()}


def synthesize_in_process(props: dict[str, Any] | None = None) -> dict[str, Any]:
    """Synthesize the construct in a bare stack and return its template (imports aws_cdk)."""
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    import aws_cdk as cdk

    from punctual.cdk import Scheduler

    with tempfile.TemporaryDirectory(prefix="punctual-synth-") as outdir:
        app = cdk.App(outdir=outdir, context={"aws:cdk:bundling-stacks": []})
        stack = cdk.Stack(app, STACK_NAME)
        Scheduler(stack, CONSTRUCT_ID, **construct_kwargs(props or {}))
        return app.synth().get_stack_by_name(STACK_NAME).template


def synthesize(props: dict[str, Any] | None = None, timeout_s: float = 300) -> dict[str, Any]:
    """Synthesize in a child process (node stays out of the long-running local stack)."""
    from punctual.extras import missing_message

    missing = missing_message("synthesizing the Scheduler construct (no --template given, none cached)",
                              ["aws_cdk", "constructs"])
    if missing:
        raise TemplateError(missing)
    with tempfile.TemporaryDirectory(prefix="punctual-tpl-") as tmp:
        out = Path(tmp) / "template.json"
        cmd = [sys.executable, "-m", "punctual.local.template", str(out), json.dumps(props or {})]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise TemplateError("synthesizing the construct failed: " + " | ".join(tail))
        return json.loads(out.read_text())


def load_template(
    template_path: str | Path | None = None,
    cache_dir: str | Path | None = None,
    props: dict[str, Any] | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """The template: from a file (a synthesized stack or cdk.out/*.template.json), else synthesized (cached)."""
    if template_path is not None:
        path = Path(template_path)
        if not path.exists():
            raise TemplateError(f"template file not found: {path}")
        return json.loads(path.read_text())
    key = _sources_key(props or {})
    cached = Path(cache_dir) / f"template-{key}.json" if cache_dir else None
    if cached is not None and cached.exists():
        return json.loads(cached.read_text())
    log("synthesizing the Scheduler construct (cached afterwards)...")
    template = synthesize(props)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(json.dumps(template, indent=1, sort_keys=True))
        tmp.replace(cached)
    return template


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    props = json.loads(argv[1]) if len(argv) > 1 else {}
    template = synthesize_in_process(props)
    out.write_text(json.dumps(template, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
