"""The W3C traceparent header a request carries (domain/trace_context.py): user
input, accepted only in its exact version-00 form, and kept out of the payload
a handler reads."""
import pytest

from domain import trace_context

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_header_is_parsed():
    assert trace_context.parse(VALID) == (0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1)
    assert trace_context.checked(f"  {VALID} ") == VALID


@pytest.mark.parametrize("value", [
    None, "", 42, VALID.upper(), VALID + "-extra", VALID[:-1], "ff" + VALID[2:], "01" + VALID[2:],
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
    VALID.replace("-", "_"), "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "x" * 10_000,
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n"])
def test_anything_else_is_ignored(value):
    assert trace_context.parse(value) is None
    if not (isinstance(value, str) and value.strip() == VALID):
        assert trace_context.checked(value) is None


def test_the_handler_reads_the_payload_without_it():
    payload = {"moniker": "scripted", "traceparent": VALID}
    assert trace_context.without(payload) == {"moniker": "scripted"}
    plain = {"moniker": "scripted"}
    assert trace_context.without(plain) is plain
