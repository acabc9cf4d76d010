import pytest

from promptcache.volatile import find_volatile

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
]

NEGATIVES = [
    "version 1.2.3 and v10.4.1, Python 3.11.4",
    "short hex deadbeef, a1b2c3, git 9fceb02",
    "colour #ff8800",
    "open 9:00-17:00 and 10:30 AM",
    "the year 2024 and 60 days, $1,000, 1,024 tokens",
    "model SmolLM2-135M-Instruct, gpt-4o-2024-08-06 is a name",  # dated model names below
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
    assert text[m.start:m.end] == match  # offsets index the scanned string


@pytest.mark.parametrize("text", NEGATIVES)
def test_negatives(text):
    found = [(m.kind, m.text) for m in find_volatile(text)]
    if "gpt-4o-2024-08-06" in text:
        # a dated model snapshot contains an ISO date: flagged (it is a date), nothing else
        assert found == [("date", "2024-08-06")]
    else:
        assert found == []


def test_several_in_order():
    text = "a 2024-05-01 b 550e8400-e29b-41d4-a716-446655440000 c 12:00:01"
    assert [m.kind for m in find_volatile(text)] == ["date", "uuid", "clock_time"]


def test_type_error():
    with pytest.raises(TypeError):
        find_volatile(b"2024-05-01")  # type: ignore[arg-type]
