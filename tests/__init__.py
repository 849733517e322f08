"""sforge's test suite: unit/ (no Docker), integration/ (real daemon, registry, SLURM,
browser), helpers/ (code they share), fixtures/ (benchmarks and cases they read)."""
