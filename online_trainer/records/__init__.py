"""Episode records: the record format, its pickled streams, crash-safe storage and the loaders."""
