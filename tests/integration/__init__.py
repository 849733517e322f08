"""Integration tests: a real Docker daemon, registry, SLURM, headless browser or Snakemake
run; each module says by its marks (docker, registry, slurm, ...) what it needs."""
