"""Snakemake executor `sforge-slurm`: the stock SLURM executor plugin
(snakemake-executor-plugin-slurm 2.x), with two changes that make small jobs cheap.

1. A SLURM job runs its Snakemake with the local executor, in threads. The stock plugin
   starts every job through `slurm-jobstep`, which runs each member of a group job as its
   own `srun` + Snakemake start (+ one more Snakemake process for a `run:` rule): three
   Snakemake starts per one-second judge. Here a group of N judges starts Snakemake once
   and runs its members in threads, at most `--cores` at a time (the SLURM allocation of
   the group). The job still runs inside its SLURM allocation (the batch step).
2. Status polling keeps to --seconds-between-status-checks. The stock plugin adds 10 s to
   the interval after every round in which no job finished (up to 180 s), so the end of a
   run is noticed up to minutes late.

Everything else (sbatch options, resources, accounts, partitions, squeue/sacct status,
cancellation, logs) is the stock plugin's, and so are the settings, under the prefix
`--sforge-slurm-` instead of `--slurm-`.
"""

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings, common_settings

__all__ = ["Executor", "ExecutorSettings", "common_settings"]


class Executor(SlurmExecutor):
    def additional_general_args(self):
        # stock: "--executor slurm-jobstep --jobs 1" (an srun + Snakemake per job)
        return "--force-use-threads"

    async def check_active_jobs(self, active_jobs):
        async for job_info in super().check_active_jobs(active_jobs):
            yield job_info
        cap = self.workflow.remote_execution_settings.seconds_between_status_checks
        if self.next_seconds_between_status_checks > cap:
            self.next_seconds_between_status_checks = cap
