"""`python -m sforge`: the sforge command line."""

from sforge.cli.main import run

run()
