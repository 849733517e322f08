# Agent runs: one target per (run, task, repeat). The agent's bundle is a target of its own,
# made once per machine; the work image is the task's. Settings: config `run:`, else the
# run's spec.json written by `sforge run`.
from sforge.runs import targets as R


rule agent_bundle:
    output:
        str(P.layout.agent_sentinel("{agent}", "{digest}")),
    log:
        str(P.layout.step_log("agents/{agent}-{digest}")),
    wildcard_constraints:
        digest=DIGEST,
    run:
        R.make_bundle_target(P, wildcards.agent, wildcards.digest, output[0], log=log[0])


rule agent_run:
    input:
        work=lambda w: ancient(str(P.sentinel(P.refs[w.task]["work"]))),
        bundle=lambda w: ancient(R.bundle_sentinel(P, w.run)),
    output:
        str(P.layout.run_record("{run}", "{task}", "{repeat}")),
    log:
        str(P.layout.run_log("{run}", "{task}", "{repeat}")),
    wildcard_constraints:
        task=ids_regex(P.bench.tasks),
        repeat="[0-9]+",
    threads: lambda w: R.run_threads(P, w.run, w.task)
    resources:
        mem_mb=lambda w: R.run_mem_mb(P, w.run, w.task),
        runtime=lambda w: R.run_runtime_min(P, w.run),
    run:
        R.make_run_target(P, wildcards.run, wildcards.task, int(wildcards.repeat))
