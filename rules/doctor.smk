# `sforge doctor --profile P`: one small job per cluster node, pinned to it, that checks the
# node (Python, Docker, judge images, the shared results dir) and sweeps its orphaned judges.
# The check is a command's (sforge.commands.doctor), above the rules' functions' layer.
from sforge.commands import doctor as D


rule doctor_node:
    output:
        str(P.layout.doctor_report("{run}", "{node}")),
    log:
        str(P.layout.doctor_log("{run}", "{node}")),
    wildcard_constraints:
        run="[0-9T]+-[0-9a-f]{6}",
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
        slurm_extra=lambda w: f"--nodelist={w.node}",
    run:
        T.logged_job(log[0], f"doctor: node {wildcards.node}", D.node_report, P, wildcards.run,
                     wildcards.node, Path(output[0]))
