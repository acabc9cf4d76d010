import pytest

from promptcache.prompt.volatile import find_volatile

POSITIVES = [
    ("Current time: 2024-05-01T12:34:56.123Z.", "iso_datetime", "2024-05-01T12:34:56.123Z"),
    ("at 2024-05-01 09:30 UTC", "iso_datetime", "2024-05-01 09:30"),
    ("ts 2024-05-01T12:34:56+02:00", "iso_datetime", "2024-05-01T12:34:56+02:00"),
    ("Date: Wed, 01 May 2024 12:34:56 GMT", "http_date", "Wed, 01 May 2024 12:34:56 GMT"),
    ("Wed May  1 12:34:56 2024", "http_date", "Wed May  1 12:34:56 2024"),
    ("today is 2024-05-01.", "date", "2024-05-01"),
    ("today is 2024/05/01.", "date", "2024/05/01"),
    ("today is 05/01/2024", "date", "05/01/2024"),
    ("heute 1.5.2024", "date", "1.5.2024"),
    ("today is May 1, 2024", "date", "May 1, 2024"),
    ("on 1st March 2025", "date", "1st March 2025"),
    ("clock 23:59:59", "clock_time", "23:59:59"),
    ("id 550e8400-e29b-41d4-a716-446655440000", "uuid", "550e8400-e29b-41d4-a716-446655440000"),
    ("t=1714567890", "epoch_seconds", "1714567890"),
    ("t=1714567890123", "epoch_millis", "1714567890123"),
    ("t=1714567890123456", "epoch_micros", "1714567890123456"),
    ("request req_01HZX8Y9ABCDEF", "request_id", "req_01HZX8Y9ABCDEF"),
    ("reply to msg_01XFDUDYJgAACzvnptvVoYEL", "request_id", "msg_01XFDUDYJgAACzvnptvVoYEL"),
    ("chatcmpl-9abcDEF12345xyz", "request_id", "chatcmpl-9abcDEF12345xyz"),
    ("trace 4bf92f3577b34da6a3ce929d0e0e4736", "hex_id", "4bf92f3577b34da6a3ce929d0e0e4736"),
    ("nonce aB3dE5fG7hJ9kL1mN3pQ5r", "base64_id", "aB3dE5fG7hJ9kL1mN3pQ5r"),
    # compact forms: ISO 8601 basic, a compact date with a clock, a compact date alone
    ("as of 20241022 12:00", "iso_datetime", "20241022 12:00"),
    ("stamp 20241022T120000Z", "iso_datetime", "20241022T120000Z"),
    ("snapshot of 20241022.", "date", "20241022"),
    # dates that are not part of a model name stay dates
    ("Today is 2024-08-06", "date", "2024-08-06"),
    ("date: 2024-08-06T10:00:00Z", "iso_datetime", "2024-08-06T10:00:00Z"),
    ("read logs-2024-08-06.txt", "date", "2024-08-06"),
    ("gpt-4o - 2024-08-06 release notes", "date", "2024-08-06"),  # not attached: spaces
    ("the gpt-4o/2024-08-06 run", "date", "2024-08-06"),  # attached by "/", not "-"
    # a long hyphenated name (a base64_id candidate, not random) no longer hides what is in it
    ("see snapshot-taken-2024-08-06 first", "date", "2024-08-06"),
    ("at snapshot-taken-at-2024-08-06T10:00:00Z", "iso_datetime", "2024-08-06T10:00:00Z"),
    ("job nightly-build-1714567890", "epoch_seconds", "1714567890"),
    ("id-550e8400-e29b-41d4-a716-446655440000", "uuid", "550e8400-e29b-41d4-a716-446655440000"),
]

NEGATIVES = [
    "version 1.2.3 and v10.4.1, Python 3.11.4",
    "short hex deadbeef, a1b2c3, git 9fceb02",
    "colour #ff8800",
    "open 9:00-17:00 and 10:30 AM",
    "the year 2024 and 60 days, $1,000, 1,024 tokens",
    "model SmolLM2-135M-Instruct, gpt-4o-2024-08-06 is a name",
    "order 12345678, sku 19991231, 20240231 (no Feb 31st), 1,024 tokens",  # not compact dates
    "phone 4155550123",  # 10 digits but outside the epoch window (2101)
    "pi 3.1415926535 and 0.1714567890",
    "camelCaseIdentifierWithoutDigits and CONSTANT_NAME_VALUE_HERE",
    "ip 192.168.1.10",
    "month 13: 2024-13-45 is not a date",
]


@pytest.mark.parametrize("text,kind,match", POSITIVES)
def test_positives(text, kind, match):
    found = find_volatile(text)
    assert [(m.kind, m.text) for m in found] == [(kind, match)]
    m = found[0]
    assert text[m.start : m.end] == match  # offsets index the scanned string


@pytest.mark.parametrize("text", NEGATIVES)
def test_negatives(text):
    assert [(m.kind, m.text) for m in find_volatile(text)] == []


# Dated model identifiers as the providers publish them (OpenAI "Models" pages, Anthropic
# "Models overview", Google "Gemini models", AWS Bedrock model ids): the date is the
# snapshot's release, the same on every request. Each alone, in a sentence, and as a
# fine-tuned or provider-prefixed id.
MODEL_IDS = [
    "gpt-4o-2024-08-06",
    "gpt-4o-mini-2024-07-18",
    "gpt-4.1-2025-04-14",
    "o1-2024-12-17",
    "o3-mini-2025-01-31",
    "claude-3-5-sonnet-20241022",
    "claude-3-opus-20240229",
    "claude-sonnet-4-5-20250929",
    "gemini-1.5-pro-002",
    "anthropic.claude-3-5-sonnet-20241022-v2:0",
    "us.anthropic.claude-3-7-sonnet-20250219-v1:0",
    "ft:gpt-4o-mini-2024-07-18:acme::9xYzAbCd",
    "models/gemini-1.5-pro-002",
]


@pytest.mark.parametrize("model", MODEL_IDS)
def test_dated_model_names_are_not_volatile(model):
    assert find_volatile(model) == []
    assert find_volatile(f"You run on {model}. Answer briefly.") == []
    assert find_volatile(f"model={model!r}") == []


def test_model_name_next_to_a_real_date():
    text = "Today is 2024-08-06; you are gpt-4o-2024-08-06, as of 20241022 12:00."
    found = [(m.kind, m.start, m.text) for m in find_volatile(text)]
    # offsets by hand: "Today is " 9 chars; then "2024-08-06" 10, "; you are " 10,
    # "gpt-4o-2024-08-06" 17, ", as of " 8: 9 + 10 + 10 + 17 + 8 = 54
    assert found == [("date", 9, "2024-08-06"), ("iso_datetime", 54, "20241022 12:00")]


def test_several_in_order():
    text = "a 2024-05-01 b 550e8400-e29b-41d4-a716-446655440000 c 12:00:01"
    assert [m.kind for m in find_volatile(text)] == ["date", "uuid", "clock_time"]


def test_type_error():
    with pytest.raises(TypeError):
        find_volatile(b"2024-05-01")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,match",
    [
        ("/var/log/claude/logs-2026-11-29", "2026-11-29"),  # a path: the family is not attached
        ("https://example.com/gpt/export-2026-11-29.json", "2026-11-29"),
        ("embedding-cache-2026-11-29", "2026-11-29"),  # a family word with no version
        ("Project Titan-2026-11-29", "2026-11-29"),
        ("claude-notes-2024-08-06", "2024-08-06"),
    ],
)
def test_a_family_word_without_a_model_id_does_not_hide_a_date(text, match):
    assert [(m.kind, m.text) for m in find_volatile(text)] == [("date", match)]


@pytest.mark.parametrize(
    "text,match",
    [
        ("build 20261129124617", "20261129124617"),  # f"{now:%Y%m%d%H%M%S}"
        ("build 202611291246", "202611291246"),  # f"{now:%Y%m%d%H%M}"
    ],
)
def test_compact_datetime_digits(text, match):
    assert [(m.kind, m.text) for m in find_volatile(text)] == [("iso_datetime", match)]


@pytest.mark.parametrize("text", ["id 20261129999999", "n 20261399123456"])  # hour 99, month 13
def test_compact_digits_that_are_no_datetime(text):
    assert find_volatile(text) == []
