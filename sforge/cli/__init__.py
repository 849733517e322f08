"""The command line: argparse and printing; what each command does lives in sforge.commands."""
