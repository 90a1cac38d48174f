"""One run: the agent protocol, factories, the act-step-update loop, episode accounting, evaluation and the run's records. numpy and gymnasium only."""
