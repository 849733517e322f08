"""`sforge import`: Harbor and Terminal-Bench tasks converted to sforge tasks.

Each reader (harbor.py, terminal_bench.py) turns a source task into a `Draft`: what the task
says, where its files are, and every reason it does not fit sforge's model (the answer is
files in the submission). `convert.py` writes what fits and `reference.py` makes the
reference archive by running the task's own solution in its work image. Nothing that does
not fit is written: the report says why instead.
"""

from sforge.importers.convert import ImportReport, import_tasks

FORMATS = ("harbor", "terminal-bench")

__all__ = ["FORMATS", "ImportReport", "import_tasks"]
