"""Tests of zonestore."""
