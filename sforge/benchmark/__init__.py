"""A benchmark on disk: the task model, its loading, content hashes, image tags, blobs, score
formulas and where products go."""
