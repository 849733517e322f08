# Base, work and judge images. Outputs are hash-stamped sentinels; inputs are ancient, so
# only a missing sentinel (a new content hash, or an image gone) makes a build.


def base_input(wildcards):
    """The base, and for a judge built FROM ${WORK_IMAGE} its work image."""
    return [ancient(str(P.sentinel(r))) for r in P.refs[wildcards.task][wildcards.kind].deps]


def blob_inputs(wildcards):
    return [ancient(str(p)) for p in T.blob_paths(P, wildcards.task, wildcards.kind)]


rule base_image:
    output:
        str(P.layout.root / "images" / "base" / "{name}" / "{digest}.json"),
    wildcard_constraints:
        digest=DIGEST,
    resources:
        docker_builds=1,
    run:
        T.make_image_target(P, "base", wildcards.name, wildcards.digest)


rule task_image:
    input:
        base_input,
        blob_inputs,
    output:
        str(P.layout.root / "images" / "{kind}" / "{task}" / "{digest}.json"),
    wildcard_constraints:
        kind="work|judge",
        digest=DIGEST,
        task=ids_regex(P.bench.tasks),
    resources:
        docker_builds=1,
    run:
        T.make_image_target(P, wildcards.kind, wildcards.task, wildcards.digest)


rule images:
    input:
        [str(P.sentinel(ref)) for ref in P.images()],
