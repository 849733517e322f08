"""Unit tests: pure functions, parsing, hashing, rescaling, aggregation, the CLI's parsing;
no Docker daemon, registry, SLURM or browser."""
