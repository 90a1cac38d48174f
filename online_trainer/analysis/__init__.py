"""Loading results back and summarising them: DataFrames, statistics with confidence intervals, plots. Never imported by workers."""
