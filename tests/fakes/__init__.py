"""Test doubles built from readings recorded on real hardware (tests/fixtures/)."""
