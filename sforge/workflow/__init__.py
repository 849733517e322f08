"""The Snakemake side: the one wrapper of its API and the functions the rules call."""
