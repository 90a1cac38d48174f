"""The option groups (evaluation, checkpoints, records, execution) and their one validator."""
