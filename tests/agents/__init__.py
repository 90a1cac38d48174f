"""Tests of the reference agents."""
