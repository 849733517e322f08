# Shared state for every rule: the pipeline (benchmark, tags, submissions) and the
# functions rules call. Parsing makes no Docker call unless this is the main process and
# verify_images is on (then stale sentinels are dropped before planning).
import sys

from sforge import targets as T
from sforge.config import load_config
from sforge.pipeline import get_pipeline

P = get_pipeline(load_config(overrides=config, env={}))

if config.get("verify_images", True) and workflow.is_main_process:
    try:
        for dropped in T.verify_sentinels(P):
            print(f"sforge: image gone, will rebuild: {dropped}", file=sys.stderr)
    except Exception as exc:  # no daemon: planning still works, building will say why
        print(f"sforge: cannot check images ({exc})", file=sys.stderr)

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
