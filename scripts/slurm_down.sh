#!/usr/bin/env bash
# Stop what scripts/slurm_up.sh started (slurmd, slurmctld, and munged when it started it),
# whatever state they are in. Cancels the jobs still queued there first. Never fails.
set -uo pipefail
STATE=/run/sforge-slurm
log() { printf 'slurm_down: %s\n' "$*" >&2; }

# Only a cluster slurm_up.sh started: never touch someone else's jobs.
if [ -s "$STATE/slurmctld.pid" ] && command -v scancel >/dev/null; then
  timeout 10 scancel --full --quiet --user="$(id -un)" >/dev/null 2>&1
fi
for d in slurmd slurmctld munged; do
  pidfile="$STATE/$d.pid"
  [ -s "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { log "$d ($pid) ignored TERM, killing"; kill -KILL "$pid" 2>/dev/null; }
    log "stopped $d ($pid)"
  fi
  rm -f "$pidfile"
done
# Take our slurm.conf away too (slurm_up.sh writes it again): with a config that names a
# controller that is down, `scontrol show config` waits 9 s, and the SLURM executor plugin
# runs it when Snakemake imports its plugins, i.e. at every Snakemake start on this host.
CONF=/etc/slurm/slurm.conf
if [ -f "$CONF" ] && grep -qF "# written by sforge scripts/slurm_up.sh" "$CONF"; then
  rm -f "$CONF"
fi
exit 0
