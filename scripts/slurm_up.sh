#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the tests and bench/bench_slurm.py:
# installs Debian's slurm-wlm + munge when missing, writes /etc/slurm/slurm.conf (this
# host is controller and only compute node; CPUs from nproc, RealMemory from free; no
# accounting), starts a munged of its own (socket under /run/sforge-slurm/munge), slurmctld
# and slurmd, and waits until `sinfo` shows the node idle. What it shares with
# scripts/slurm_nodes.sh (packages, munge, most of slurm.conf) is in scripts/slurm_lib.sh. Idempotent: a cluster already up with the same config is left alone (a changed
# config restarts the daemons). Stop it with scripts/slurm_down.sh.
#
# The config goes to /etc/slurm/slurm.conf so that every client finds it without
# SLURM_CONF (SLURM_CONF works as well: scripts/slurm_nodes.sh uses only it). An existing
# slurm.conf that this script did not write is never replaced (set SFORGE_SLURM_FORCE=1 to
# replace it, a backup is kept).
set -euo pipefail
SLURM_LIB_NAME=slurm_up
. "$(dirname "$0")/slurm_lib.sh"

CONF=/etc/slurm/slurm.conf
STATE=/run/sforge-slurm            # pid files, munge, and what this script started
MARK="# written by sforge scripts/slurm_up.sh"
PARTITION="${SFORGE_SLURM_PARTITION:-main}"

[ "$(id -u)" = 0 ] || die "must run as root (installs packages, starts daemons)"

# 1. Packages
install_slurm
mkdir -p "$STATE"

# 2. slurm.conf for this one node
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_TOTAL=$(free -m | awk '/^Mem:/ {print $2}')
REAL_MEM=$(( MEM_TOTAL * 95 / 100 ))   # slurmd drains a node that has less than declared
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  [ "${SFORGE_SLURM_FORCE:-0}" = 1 ] || die "$CONF exists and was not written by sforge; " \
    "set SFORGE_SLURM_FORCE=1 to replace it (a backup is kept)"
  cp "$CONF" "$CONF.sforge-backup.$(date +%s)"
fi
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
{
  echo "$MARK"
  cat <<CONF
# Single-node test cluster: $HOST is controller and the only compute node.
ClusterName=sforge
SlurmctldHost=$HOST(127.0.0.1)
AuthInfo=socket=$STATE/munge/munge.socket
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdTimeout=60
CONF
  slurm_conf_shared
  echo "NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MEM State=UNKNOWN"
  echo "PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP"
} > "$CONF.tmp"

# 3. munge: a munged of this cluster's own (socket in AuthInfo above)
start_munged "$STATE/munge"

# Already up with this very config: leave it (and the jobs it runs) alone.
if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" && cmp -s "$CONF.tmp" "$CONF"; then
  state=$(sinfo -h -N -n "$HOST" -o %T 2>/dev/null | head -n1)
  case "$state" in
    idle|mixed|allocated|completing) rm -f "$CONF.tmp"; log "already up (node $state)"; exit 0 ;;
  esac
fi
mv "$CONF.tmp" "$CONF"

# 4. slurmctld and slurmd (ours restart: the config changed or the node is not well)
stop_pid "$STATE/slurmd.pid"
stop_pid "$STATE/slurmctld.pid"
log "starting slurmctld and slurmd ($HOST: $CPUS CPUs, $REAL_MEM MB)"
start_slurmctld
slurmd

# 5. wait for the node
wait_idle "$HOST"
log "up: partition $PARTITION, node $HOST idle"
