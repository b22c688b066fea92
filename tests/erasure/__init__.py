"""Tests of erasure."""
