"""Differential check harness (see bench/differential_check.py and docs/differential-check.md)."""
