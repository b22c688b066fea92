"""gateway/s3/numbers.py: the one parser of client numbers takes `[0-9]+` and a bound, nothing
else, whatever the length of the input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.s3.errors import S3Error
from gateway.s3.numbers import INT32_MAX, parse_uint, shown, uint_arg


@given(st.integers(0, 2**63 - 1), st.integers(0, 30))
def test_digits_round_trip(n, zeros):
    assert parse_uint("0" * zeros + str(n)) == n


@pytest.mark.parametrize("text", ["", " 5", "5 ", "+5", "-5", "1_000", "1e3", "0x10", "²", "١٢",
                                  "٣", "5\n", "\u0665"])
def test_anything_but_ascii_digits_is_refused(text):
    with pytest.raises(ValueError):
        parse_uint(text)


def test_bounds_and_saturation_never_convert_long_input():
    long = "9" * 100_000  # int() would refuse past 4,300 digits; we never convert it
    with pytest.raises(ValueError):
        parse_uint(long)
    assert parse_uint(long, saturate=True) == 2**63 - 1
    assert parse_uint("11", hi=10, saturate=True) == 10
    with pytest.raises(ValueError):
        parse_uint("11", hi=10)
    assert parse_uint("0" * 100_000 + "7", hi=10) == 7


def test_uint_arg_is_invalid_argument_naming_the_field():
    assert uint_arg("17", "max-keys") == 17
    for bad in ("-1", "x", str(INT32_MAX + 1), "\x00"):
        with pytest.raises(S3Error) as e:
            uint_arg(bad, "max-keys", lo=0)
        assert e.value.code == "InvalidArgument" and e.value.extra["ArgumentName"] == "max-keys"
    with pytest.raises(S3Error):
        uint_arg("0", "partNumber", lo=1)
    assert shown("a\x00\r\n") == "a\\x00\\r\\n"
