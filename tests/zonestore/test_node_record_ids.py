"""The record id rule (zonestore/ids.py) accepts safe ids and refuses every path trick."""

import pytest

from zonestore.ids import validate_record_id


@pytest.mark.parametrize("good", ["a", "0", "_x", ":x", "abc.f01", "u-1_2:3.4", "x" * 200])
def test_valid_ids_are_returned_unchanged(good):
    assert validate_record_id(good) == good


@pytest.mark.parametrize("bad", [
    "", ".", "..", ".hidden", "-x", "a/b", "../etc", "a\\b", "a%2fb", "a\x00b", "a\nb", "a b",
    "é", "x" * 201, None, 12, b"abc",
])
def test_path_tricks_and_bad_types_are_refused(bad):
    with pytest.raises(ValueError):
        validate_record_id(bad)
