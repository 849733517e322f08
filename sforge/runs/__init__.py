"""Agent runs: an agent (a definition plus a prepared bundle) works on a task in its work
container, submits through the judge service, and leaves a run record under
results/<bench>/runs/<run>/<task>/<repeat>/."""

# The commands of sforge.runs.cli with their one-line help: `sforge --help` lists them, and
# any other command builds its parser without importing the run machinery.
COMMANDS = {
    "run": "run an agent on tasks (one Snakemake target per run)",
    "runs": "list agent runs (state, best, tokens, cost, elapsed, error); cancel one",
    "agents": "list agents; prepare their bundles on this machine",
    "prove": "prove tasks: the oracle gets full marks, the no-op stays at the floor",
}
