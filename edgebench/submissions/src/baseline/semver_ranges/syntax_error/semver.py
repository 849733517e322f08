"""A submission that does not even import: every hidden test fails, a valid score of 0."""

def parse(text)
    return text
