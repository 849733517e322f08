# Base, work and judge images. Outputs are hash-stamped sentinels; inputs are ancient, so
# only a missing sentinel (a new content hash, or an image gone) makes a build.


rule base_image:
    output:
        str(L.sentinel("base", "{name}", "{digest}")),
    log:
        str(L.build_log("base", "{name}", "{digest}")),
    wildcard_constraints:
        digest=DIGEST,
    resources:
        docker_builds=1,
    run:
        T.make_image_target(P, output[0], force=FORCE, push=PUSH, log=log[0])


rule task_image:
    input:
        base_input,
        blob_inputs,
    output:
        str(L.sentinel("{kind}", "{task}", "{digest}")),
    log:
        str(L.build_log("{kind}", "{task}", "{digest}")),
    wildcard_constraints:
        kind="work|judge",
        digest=DIGEST,
        task=ids_regex(P.bench.tasks),
    resources:
        docker_builds=1,
    run:
        T.make_image_target(P, output[0], force=FORCE, push=PUSH, log=log[0])


rule images:
    input:
        [str(P.sentinel(ref)) for ref in P.images()],
