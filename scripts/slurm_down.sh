#!/usr/bin/env bash
# Stop what scripts/slurm_up.sh started (slurmd, slurmctld, its munged), whatever state
# they are in. Cancels the jobs still queued there first. Never fails.
set -uo pipefail
SLURM_LIB_NAME=slurm_down
. "$(dirname "$0")/slurm_lib.sh"
STATE=/run/sforge-slurm

# Only a cluster slurm_up.sh started: never touch someone else's jobs.
if [ -s "$STATE/slurmctld.pid" ] && command -v scancel >/dev/null; then
  timeout 10 scancel --full --quiet --user="$(id -un)" >/dev/null 2>&1
fi
for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" "$STATE/munge/munged.pid"; do
  stop_pid "$pidfile"
done
# Take our slurm.conf away too (slurm_up.sh writes it again): with a config that names a
# controller that is down, `scontrol show config` waits 9 s, and the SLURM executor plugin
# runs it when Snakemake imports its plugins, i.e. at every Snakemake start on this host.
CONF=/etc/slurm/slurm.conf
if [ -f "$CONF" ] && grep -qF "# written by sforge scripts/slurm_up.sh" "$CONF"; then
  rm -f "$CONF"
fi
exit 0
