# Base, work and judge images. Outputs are hash-stamped sentinels; inputs are ancient, so
# only a missing sentinel (a new content hash, or an image gone) makes a build.


rule base_image:
    output:
        str(P.layout.root / "images" / "base" / "{name}" / "{digest}.json"),
    log:
        str(P.layout.build_log("base", "{name}", "{digest}")),
    wildcard_constraints:
        digest=DIGEST,
    resources:
        docker_builds=1,
    run:
        T.make_image_target(P, "base", wildcards.name, wildcards.digest, log=log[0])


rule task_image:
    input:
        base_input,
        blob_inputs,
    output:
        str(P.layout.root / "images" / "{kind}" / "{task}" / "{digest}.json"),
    log:
        str(P.layout.build_log("{kind}", "{task}", "{digest}")),
    wildcard_constraints:
        kind="work|judge",
        digest=DIGEST,
        task=ids_regex(P.bench.tasks),
    resources:
        docker_builds=1,
    run:
        T.make_image_target(P, wildcards.kind, wildcards.task, wildcards.digest, log=log[0])


rule images:
    input:
        [str(P.sentinel(ref)) for ref in P.images()],
