from sforge.cli.main import run

run()
