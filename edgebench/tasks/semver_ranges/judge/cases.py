"""The hidden cases of semver_ranges (README.md is the spec): inputs and expected outcomes.

Root-only in the judge image. The submission's process gets the inputs of each case and
nothing else (bin/run_cases.py); grade.py compares its answers with these expectations.
"""

# parse(text) returns a Version with these (major, minor, patch, prerelease, build), and
# str() of it is `text`.
PARSE_VALID = [
    ("0.0.0", (0, 0, 0, (), ())),
    ("1.2.3", (1, 2, 3, (), ())),
    ("10.20.30", (10, 20, 30, (), ())),
    ("1.0.0-alpha.1", (1, 0, 0, ("alpha", 1), ())),
    ("1.0.0-0.3.7", (1, 0, 0, (0, 3, 7), ())),
    ("1.0.0-x-y-z.--", (1, 0, 0, ("x-y-z", "--"), ())),
    ("1.0.0+20130313144700", (1, 0, 0, (), ("20130313144700",))),
    ("1.0.0-beta+exp.sha.5114f85", (1, 0, 0, ("beta",), ("exp", "sha", "5114f85"))),
    ("2.0.0+build.007", (2, 0, 0, (), ("build", "007"))),
    ("1.0.0-rc.1a", (1, 0, 0, ("rc", "1a"), ())),
]

# parse(text) raises ValueError.
PARSE_INVALID = [
    "1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "v1.2.3", " 1.2.3", "1.2.3 ",
    "1.2.3-", "1.2.3-01", "1.2.3-a..b", "1.2.3+", "1.2.3+a_b", "1.2.-3", "",
]

# compare(a, b) == want and compare(b, a) == -want.
COMPARE = [
    ("1.0.0", "2.0.0", -1),
    ("2.1.0", "2.0.9", 1),
    ("2.1.1", "2.1.1", 0),
    ("1.10.0", "1.9.0", 1),
    ("1.0.0-alpha", "1.0.0", -1),
    ("1.0.0-alpha", "1.0.0-alpha.1", -1),
    ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),
    ("1.0.0-alpha.beta", "1.0.0-beta", -1),
    ("1.0.0-beta.2", "1.0.0-beta.11", -1),
    ("1.0.0-beta.11", "1.0.0-rc.1", -1),
    ("1.0.0-rc.1", "1.0.0", -1),
    ("1.0.0-Beta", "1.0.0-alpha", -1),
    ("1.0.0+build.1", "1.0.0+build.2", 0),
    ("1.0.0-2", "1.0.0-10", -1),
    ("1.0.0-a-b", "1.0.0-a", 1),
]

# compare(a, b) raises ValueError.
COMPARE_INVALID = ("1.0", "1.0.0")

# satisfies(version, range) is want (the bool itself).
SATISFIES = [
    # plain comparators and sets
    ("1.2.3", "1.2.3", True),
    ("1.2.3+meta", "=1.2.3", True),
    ("1.2.4", ">1.2.3", True),
    ("1.2.3", ">1.2.3", False),
    ("1.2.3", ">=1.2.3 <2.0.0", True),
    ("2.0.0-alpha", ">=1.2.3 <2.0.0", True),
    ("2.0.0", ">=1.2.3 <2.0.0", False),
    ("1.5.0", "  >=1.0.0   <=1.5.0  ", True),
    # unions
    ("3.1.0", "1.x || >=3.0.0 <4", True),
    ("2.5.0", "1.x || >=3.0.0 <4", False),
    ("0.0.1", "||", True),
    # wildcards and partial versions
    ("9.9.9-rc.1", "*", True),
    ("1.7.2", "1.x", True),
    ("1.2.0-alpha", "1.2", True),
    ("1.3.0-0", "1.2.x", False),
    ("2.0.0", "x.x.x", True),
    ("1.2.9", ">1.2", False),
    ("1.3.0-alpha", ">1.2", True),
    ("1.2.0-alpha", ">=1.2", True),
    ("1.1.99", "<1.2", True),
    ("1.2.0-0", "<1.2", False),
    ("1.2.99", "<=1.2", True),
    ("1.3.0-0", "<=1.2", False),
    # caret
    ("1.9.9", "^1.2.3", True),
    ("2.0.0-0", "^1.2.3", False),
    ("1.2.3-beta", "^1.2.3", False),
    ("0.2.9", "^0.2.3", True),
    ("0.3.0", "^0.2.3", False),
    ("0.0.4", "^0.0.3", False),
    ("0.0.3", "^0.0.3", True),
    ("0.0.9", "^0.0", True),
    ("0.1.0", "^0.0", False),
    ("0.9.0", "^0.x", True),
    ("1.2.3-beta.4", "^1.2.3-beta.2", True),
    ("1.2.3-alpha", "^1.2.3-beta.2", False),
    ("5.0.0", "^*", True),
    # tilde
    ("1.2.9", "~1.2.3", True),
    ("1.3.0", "~1.2.3", False),
    ("1.2.0-rc", "~1.2", True),
    ("1.9.0", "~1", True),
    ("2.0.0-0", "~1", False),
    # hyphen ranges
    ("2.3.4", "1.2.3 - 2.3.4", True),
    ("2.3.5", "1.2.3 - 2.3.4", False),
    ("2.3.99", "1.2.3 - 2.3", True),
    ("2.4.0-0", "1.2.3 - 2.3", False),
    ("1.0.0", "1.2 - 2", False),
]

# satisfies(version, range) raises ValueError.
SATISFIES_INVALID = [
    ("1.2.3", ">= 1.2.3"),
    ("1.2.3", "1.x.3"),
    ("1.2.3", "01.2"),
    ("1.2.3", "1.2.3.4"),
    ("1.2.3", "~>1.2"),
    ("1.2", "*"),
]
