"""One archive graded in one judge container: hostile-archive filtering, the judge run, the result
record and its key, claims."""
