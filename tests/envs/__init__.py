"""Tests of the env factories and toy envs."""
