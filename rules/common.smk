# Shared state for every rule: the pipeline (benchmark, tags, submissions), the functions
# rules call, and this run's flags. Parsing makes no Docker call and changes nothing on
# disk: stale sentinels are dropped before planning by the CLI, or by `sforge verify`.
import sys
from pathlib import Path

from sforge.workflow import targets as T
from sforge.grading.capacity import judge_demand
from sforge.core.config import load_config
from sforge.plan.pipeline import get_pipeline
from sforge.plan.planner import docker_builds

P = get_pipeline(load_config(overrides=config, env={}))
L = P.layout
# Run flags come from this run's config and are passed to the functions as arguments.
FORCE = bool(config.get("force"))
PUSH = bool(config.get("push"))

# One build-concurrency setting for every path: config's docker_builds, unless the command
# line (--resources docker_builds=N) or a profile set it.
if "docker_builds" not in workflow.global_resources:
    workflow.register_resource("docker_builds", docker_builds(config))

for error in P.bench.errors:
    print(f"sforge: skipping broken task: {error}", file=sys.stderr)

DIGEST = "[0-9a-f]{12}"


def ids_regex(ids):
    return "|".join(sorted(ids)) or "(?!)"


# Input functions of rules/images.smk
def base_input(wildcards):
    """The base, and for a judge built FROM ${WORK_IMAGE} its work image."""
    return [ancient(str(P.sentinel(r))) for r in P.refs[wildcards.task][wildcards.kind].deps]


def blob_inputs(wildcards):
    return [ancient(str(p)) for p in T.blob_paths(P, wildcards.task, wildcards.kind)]
