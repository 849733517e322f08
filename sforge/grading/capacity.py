"""What one judge holds while it runs, and whether it fits: the one rule of a local batch
under `-j N` (sforge.evals.batch), of the judge service's queue (sforge.service.scheduler) and of
the Snakemake evaluate rule's threads and mem_mb (rules/evaluate.smk).

A judge's demand is its task's `[judge] cpus` rounded up to whole cores, and its
`[judge] memory` in MiB. Whole cores because Snakemake's threads and a cluster's
cpus-per-task are whole numbers, and because `--cpus 0.5` is a CFS quota, not a share
reserved for the judge: two such judges on one core would leave none for the container
starts and result reading around them. A demand larger than the whole capacity is cut to
it (the judge runs alone), as Snakemake cuts a local job's threads to `--cores`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from sforge.benchmark.model import Task
from sforge.core.units import memory_mb


def machine_memory_mb() -> int:
    """The mem_mb a local run may hand out: the machine's memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)


@dataclass(frozen=True)
class JudgeDemand:
    """What one judge holds while it runs: whole cores and MiB of memory."""
    cores: int   # [judge] cpus rounded up, at least 1
    mem_mb: int  # [judge] memory in MiB


def judge_demand(task: Task) -> JudgeDemand:
    """The task's judge demand: its cpus rounded up to whole cores, its memory in MiB."""
    return JudgeDemand(max(1, math.ceil(task.judge.cpus)), memory_mb(task.judge.memory))


@dataclass
class Capacity:
    """Cores and memory judges may hold at once, and what the running ones hold."""

    cores: int
    mem_mb: int
    busy_cores: int = 0
    busy_mem_mb: int = 0

    @classmethod
    def of(cls, cpus: float, mem_mb: int) -> Capacity:
        """A capacity given in CPUs (the service's `--max-concurrent`, maybe fractional):
        judges hold whole cores, so `floor(cpus)` of them can be held, and at least one
        judge always runs."""
        return cls(max(1, math.floor(cpus)), max(1, mem_mb))

    def held(self, demand: JudgeDemand) -> JudgeDemand:
        """What `demand` holds here: cut to the whole capacity."""
        return JudgeDemand(min(demand.cores, self.cores), min(demand.mem_mb, self.mem_mb))

    def fits(self, demand: JudgeDemand) -> bool:
        """Whether `demand` (cut to the whole capacity) fits beside what is held now."""
        held = self.held(demand)
        return (held.cores <= self.cores - self.busy_cores
                and held.mem_mb <= self.mem_mb - self.busy_mem_mb)

    def take(self, demand: JudgeDemand) -> JudgeDemand:
        """Hold `demand` (which fits); → what to `release` when the judge stops."""
        held = self.held(demand)
        self.busy_cores += held.cores
        self.busy_mem_mb += held.mem_mb
        return held

    def release(self, held: JudgeDemand) -> None:
        """Give back what `take` held."""
        self.busy_cores -= held.cores
        self.busy_mem_mb -= held.mem_mb
