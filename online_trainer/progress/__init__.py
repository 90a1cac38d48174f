"""The progress display: one bar per run, or one for the whole experiment."""
