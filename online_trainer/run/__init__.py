"""One run: build and seed env and agent, the run's events, the hook runner and the run's full checkpoint."""
