"""The judge service: `sforge serve` grades agents' submissions while they work.

app (HTTP endpoints, FastAPI), state (SQLite: runs, hashed tokens, submissions, rounds,
queue, results), scheduler (judges within a CPU capacity, through the one grading
function), auth (tokens), server (uvicorn, signals, the listening sockets), client (the
Python client), launch (a service in a background process for `sforge run`).
"""
