"""The ``online-trainer`` command."""
