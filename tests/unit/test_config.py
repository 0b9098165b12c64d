from __future__ import annotations

import pytest

from punctual.core.config import ENV, META_PK, Settings, load_settings, to_environment


def test_defaults():
    s = load_settings({})
    assert (s.window_seconds, s.lead_seconds, s.orphan_grace_seconds, s.max_attempts) == (900, 300, 300, 5)
    assert s.window_ms == 900_000 and s.lead_ms == 300_000 and s.orphan_grace_ms == 300_000


def test_from_environment_and_back():
    env = {
        ENV["table_name"]: "t",
        ENV["window_seconds"]: "600",
        ENV["lead_seconds"]: "90",
        ENV["log_payloads"]: "TRUE",
        ENV["delay_queue_url"]: "https://q",
        "UNRELATED": "x",
    }
    s = load_settings(env)
    assert (s.table_name, s.window_seconds, s.lead_seconds, s.log_payloads, s.delay_queue_url) == (
        "t", 600, 90, True, "https://q")
    assert load_settings(to_environment(s)) == s
    assert load_settings(env, max_attempts=3).max_attempts == 3


@pytest.mark.parametrize(
    "env, match",
    [
        ({ENV["window_seconds"]: "abc"}, "PUNCTUAL_WINDOW_SECONDS"),
        ({ENV["window_seconds"]: "901"}, "window_seconds"),
        ({ENV["window_seconds"]: "0"}, "window_seconds"),
        ({ENV["window_seconds"]: "150", ENV["lead_seconds"]: "120"}, "lead_seconds"),
        ({ENV["lead_seconds"]: "-1"}, "lead_seconds"),
        ({ENV["max_attempts"]: "0"}, "max_attempts"),
        ({ENV["orphan_grace_seconds"]: "-5"}, "orphan_grace"),
        ({ENV["send_workers"]: "0"}, "send_workers"),
        ({ENV["partition_key_value"]: META_PK}, "reserved"),
    ],
)
def test_validation_errors(env, match):
    with pytest.raises(ValueError, match=match):
        load_settings(env)


def test_the_direct_early_margin_reaches_as_far_as_the_longest_delay_from_the_windows_end():
    """0..901,000 - the window in ms: a task due at the window's end is still visible at due + margin
    with 900 s of DelaySeconds sent a second or less after now (planning.aligned_send_times). Mutant:
    no upper bound (a margin past it would be lost at the window's end)."""
    assert load_settings({ENV["direct_early_margin_ms"]: "1000"}).direct_early_margin_ms == 1000
    assert Settings(window_seconds=600, direct_early_margin_ms=301_000).max_direct_early_margin_ms == 301_000
    for bad, window in (("-1", "900"), ("1001", "900"), ("301001", "600")):
        with pytest.raises(ValueError, match="direct_early_margin_ms must be 0..") as exc:
            load_settings({ENV["direct_early_margin_ms"]: bad, ENV["window_seconds"]: window})
        assert str(901_000 - int(window) * 1000) in str(exc.value)


def test_env_names_are_unique_and_cover_settings():
    assert len(set(ENV.values())) == len(ENV)
    assert set(ENV) <= set(Settings.__dataclass_fields__)


def test_every_send_worker_keeps_its_own_connection(monkeypatch):
    """The handlers' clients pool more connections than the poller has send workers: botocore's
    default pool (10) made 6 of the 16 workers open a new connection for every call."""
    from punctual.core import runtime

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("PUNCTUAL_SEND_WORKERS", "24")
    runtime.reset_default_deps()
    try:
        deps = runtime.default_deps()
        for client in (deps.ddb, deps.sqs, deps.events):
            assert client.meta.config.max_pool_connections > deps.settings.send_workers == 24
    finally:
        runtime.reset_default_deps()


# -- required settings, checked on the cold start -------------------------------------------------

FULL_ENV = {ENV["table_name"]: "t", ENV["delay_queue_url"]: "https://d", ENV["delivery_queue_url"]: "https://v",
            ENV["rejected_queue_url"]: "https://r", ENV["rule_name"]: "rule"}


@pytest.mark.parametrize("function, missing", [
    ("consumer", "PUNCTUAL_DELIVERY_QUEUE_URL"),
    ("consumer", "PUNCTUAL_TABLE_NAME"),
    ("consumer", "PUNCTUAL_REJECTED_QUEUE_URL"),
    ("poller", "PUNCTUAL_DELAY_QUEUE_URL"),
    ("poller", "PUNCTUAL_RULE_NAME"),
    ("editor", "PUNCTUAL_DELAY_QUEUE_URL"),
    ("editor", "PUNCTUAL_RULE_NAME"),
])
def test_a_function_without_a_setting_it_needs_refuses_to_start_naming_the_variable(function, missing):
    from punctual.core.config import MissingSetting

    for env in ({k: v for k, v in FULL_ENV.items() if k != missing}, {**FULL_ENV, missing: "  "}):
        with pytest.raises(MissingSetting, match=f"^{missing} is not set: the {function} function needs it"):
            load_settings(env, function=function)
    assert load_settings(FULL_ENV, function=function).table_name == "t"


def test_the_consumer_may_run_without_the_delay_queue_url_it_can_read_from_its_event():
    env = {k: v for k, v in FULL_ENV.items() if k != ENV["delay_queue_url"]}
    assert load_settings(env, function="consumer").delay_queue_url == ""


def test_the_handlers_check_their_settings_on_the_cold_start(monkeypatch):
    """GIVEN a consumer deployed without its delivery queue URL WHEN it is invoked THEN the very first
    invocation fails with the one error naming the variable (not every record, one by one)."""
    from punctual.functions.consumer.handler import handler

    from punctual.core import runtime
    from punctual.core.config import MissingSetting

    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)
    for name, value in FULL_ENV.items():
        if name != ENV["delivery_queue_url"]:
            monkeypatch.setenv(name, value)
    runtime.reset_default_deps()
    try:
        with pytest.raises(MissingSetting, match="PUNCTUAL_DELIVERY_QUEUE_URL"):
            handler({"Records": []}, None)
    finally:
        runtime.reset_default_deps()


def test_the_log_level_setting():
    assert load_settings({}).log_level == "INFO"
    assert load_settings({"PUNCTUAL_LOG_LEVEL": "DEBUG"}).log_level == "DEBUG"
    assert ENV["log_level"] == "PUNCTUAL_LOG_LEVEL"
    with pytest.raises(ValueError, match="log level must be one of DEBUG, INFO, WARNING, ERROR, got 'WARN'"):
        load_settings({"PUNCTUAL_LOG_LEVEL": "WARN"})


def test_the_readme_documents_the_log_level_and_each_functions_required_variables():
    import re
    from pathlib import Path

    from punctual.core.config import REQUIRED

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "| log level | `PUNCTUAL_LOG_LEVEL` | INFO |" in readme
    text = readme[readme.index("Set by the construct and required"):]
    text = text[:text.index("\n\n")]
    for function, attrs in REQUIRED.items():
        listed = re.search(rf"{function} ((?:`PUNCTUAL_\w+`[,;.]?\s*)+)", text).group(1)
        assert re.findall(r"`(PUNCTUAL_\w+)`", listed) == [ENV[a] for a in attrs], function


def test_delivery_is_consumer_or_direct_and_read_from_the_environment():
    assert Settings().delivery == "consumer" and not Settings().direct
    assert Settings(delivery="direct").direct
    with pytest.raises(ValueError, match="delivery must be one of 'consumer', 'direct'"):
        Settings(delivery="fast")
    assert load_settings({"PUNCTUAL_DELIVERY": "direct"}).direct
    assert to_environment(Settings(delivery="direct"))["PUNCTUAL_DELIVERY"] == "direct"


def test_in_direct_delivery_the_poller_and_editor_need_the_delivery_queue_and_control_topic_not_the_delay_queue():
    from punctual.core.config import MissingSetting, check_required

    base = {"PUNCTUAL_TABLE_NAME": "t", "PUNCTUAL_REJECTED_QUEUE_URL": "r", "PUNCTUAL_RULE_NAME": "rule"}
    direct = {**base, "PUNCTUAL_DELIVERY": "direct"}
    for fn in ("poller", "editor"):
        check_required({**base, "PUNCTUAL_DELAY_QUEUE_URL": "d"}, fn)
        check_required({**direct, "PUNCTUAL_DELIVERY_QUEUE_URL": "q", "PUNCTUAL_CONTROL_TOPIC_ARN": "t"}, fn)
        with pytest.raises(MissingSetting, match="PUNCTUAL_DELIVERY_QUEUE_URL"):
            check_required({**direct, "PUNCTUAL_DELAY_QUEUE_URL": "d", "PUNCTUAL_CONTROL_TOPIC_ARN": "t"}, fn)
        with pytest.raises(MissingSetting, match="PUNCTUAL_CONTROL_TOPIC_ARN"):
            check_required({**direct, "PUNCTUAL_DELIVERY_QUEUE_URL": "q", "PUNCTUAL_DELAY_QUEUE_URL": "d"}, fn)
