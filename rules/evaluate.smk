# One judge run per eval key (judge tag, archive sha256, judge settings, the configured
# limits that differ from the defaults, grading contract).
# Several sforge processes may grade one results directory: the output is update()-flagged
# so Snakemake never deletes a result another process wrote before this job runs
# (Job.prepare), and the function's per-key claim makes it wait for that result instead of
# judging again.


rule evaluate:
    input:
        lambda w: ancient(str(P.sentinel(P.refs[w.task]["judge"]))),
    output:
        update(str(L.eval_result("{task}", "{key}"))),
    log:
        str(L.eval_log("{task}", "{key}")),
    wildcard_constraints:
        key="[0-9a-f]{20}",
        task=ids_regex(P.bench.tasks),
    threads: lambda w: judge_demand(P.bench.tasks[w.task]).cores
    resources:
        mem_mb=lambda w: judge_demand(P.bench.tasks[w.task]).mem_mb,
        runtime=lambda w: T.judge_runtime_min(P, w.task),
    group:
        "judge"
    run:
        T.grade_target(P, output[0], log=log[0])


rule grade:
    input:
        [str(P.eval_path(t)) for t in P.evals.values()],
