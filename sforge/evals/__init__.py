"""Grading a plan's evals: the one grade function every grader goes through (stored result,
per-key claim, judge, atomic write) and the local batch that packs judges under -j."""
