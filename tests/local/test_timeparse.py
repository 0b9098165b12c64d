import pytest

from punctual.timeparse import TimeSpecError, parse_at_ms, parse_duration_ms, resolve_due_ms

NOW = 1_798_761_600_000  # 2027-01-01T00:00:00Z


@pytest.mark.parametrize(
    "text, ms",
    [("30s", 30_000), ("5m", 300_000), ("1h30m", 5_400_000), ("2d", 172_800_000), ("250ms", 250),
     ("1.5s", 1_500), ("90", 90_000), ("0s", 0), ("1w", 604_800_000), (" 2m 3s ", 123_000), ("1H", 3_600_000)],
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "abc", "5x", "-5s", "s", "5s garbage", "m5", "1..5s", "5 s x"])
def test_bad_durations(text):
    with pytest.raises(TimeSpecError):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    "text, ms",
    [("2027-01-01T00:00:00Z", NOW), ("2027-01-01T00:00:00.250Z", NOW + 250), ("2027-01-01T01:00:00+01:00", NOW),
     ("2027-01-01T00:00:00z", NOW), (str(NOW), NOW), ("2027-01-01 00:00:00+00:00", NOW)],
)
def test_at(text, ms):
    assert parse_at_ms(text) == ms


@pytest.mark.parametrize("text", ["2027-01-01T00:00:00", "tomorrow", "1798761600", "", "2027-13-01T00:00:00Z"])
def test_bad_at(text):
    with pytest.raises(TimeSpecError) as exc:
        parse_at_ms(text)
    assert "\n" not in str(exc.value)


def test_naive_time_says_why():
    with pytest.raises(TimeSpecError, match="no zone"):
        parse_at_ms("2027-01-01T00:00:00")


def test_resolve_due():
    assert resolve_due_ms("30s", None, NOW) == NOW + 30_000
    assert resolve_due_ms(None, "2027-01-01T00:00:00Z", NOW) == NOW
    for in_, at in ((None, None), ("1s", "2027-01-01T00:00:00Z")):
        with pytest.raises(TimeSpecError, match="exactly one"):
            resolve_due_ms(in_, at, NOW)
    with pytest.raises(TimeSpecError, match="2199"):
        resolve_due_ms(None, "2200-01-01T00:00:00Z", NOW)
    with pytest.raises(TimeSpecError, match="1970"):
        resolve_due_ms(None, "1969-12-31T23:59:59Z", NOW)
