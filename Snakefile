# sforge: build images, grade submissions, aggregate scores.
# Targets: all (default), images, grade, report; see README.md.
from pathlib import Path

from snakemake.utils import min_version, validate

from sforge.core.config import schema_path

min_version("9.0")


configfile: str(Path(workflow.basedir) / "config.yaml")


validate(config, str(schema_path()))


include: "rules/common.smk"
include: "rules/blobs.smk"
include: "rules/images.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"
include: "rules/doctor.smk"
include: "rules/runs.smk"


# Aggregation is a second of pandas: never worth a cluster job. An agent bundle is made on
# the submitting host (a run job on another node makes it there too, from the same sources).
localrules:
    agent_bundle,
    all,
    images,
    grade,
    scores,
    best,
    leaderboard,
    report,


rule all:
    input:
        rules.images.input,
        rules.grade.input,
        rules.report.output,
