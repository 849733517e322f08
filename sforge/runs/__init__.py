"""Agent runs: an agent (a definition plus a prepared bundle) works on a task in its work
container, submits through the judge service, and leaves a run record under
results/<bench>/runs/<run>/<task>/<repeat>/."""
