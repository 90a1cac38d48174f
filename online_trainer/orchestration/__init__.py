"""Plans experiments into run specs and executes them: OnlineTrainer.multi_run, sweeps, Optuna and checkpoint evaluation."""
