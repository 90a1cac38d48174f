"""The experiment directory: its manifest, its one-writer lock and its checkpoints."""
