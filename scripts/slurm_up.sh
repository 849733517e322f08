#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for the tests and bench/bench_slurm.py:
# installs Debian's slurm-wlm + munge when missing, writes /etc/slurm/slurm.conf (this
# host is controller and only compute node; CPUs from nproc, RealMemory from free; no
# accounting), starts munged, slurmctld and slurmd, and waits until `sinfo` shows the node
# idle. Idempotent: a cluster already up with the same config is left alone (a changed
# config restarts the daemons). Stop it with scripts/slurm_down.sh.
#
# The config goes to /etc/slurm/slurm.conf so that every client finds it without
# SLURM_CONF (SLURM_CONF works as well: scripts/slurm_nodes.sh uses only it). An existing
# slurm.conf that this script did not write is never replaced (set SFORGE_SLURM_FORCE=1 to
# replace it, a backup is kept).
set -euo pipefail

CONF=/etc/slurm/slurm.conf
STATE=/run/sforge-slurm            # pid files and what this script started
MARK="# written by sforge scripts/slurm_up.sh"
PARTITION="${SFORGE_SLURM_PARTITION:-main}"
log() { printf 'slurm_up: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (installs packages, starts daemons)"

# 1. Packages
missing=()
for pkg in slurm-wlm munge; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq
  # policy-rc.d: the packages' postinst must not start daemons with a config we replace.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.sforge
  chmod +x /usr/sbin/policy-rc.d.sforge
  had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
  [ $had_policy = 1 ] || cp /usr/sbin/policy-rc.d.sforge /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || { [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d; die "apt-get install failed"; }
  [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
  rm -f /usr/sbin/policy-rc.d.sforge
fi

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
node_state() { sinfo -h -N -o %T 2>/dev/null | head -n1; }

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
cat > "$CONF.tmp" <<CONF
$MARK
# Single-node test cluster: $HOST is controller and the only compute node.
ClusterName=sforge
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no cgroups (containers, gVisor): plain process tracking, no task confinement
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
# CPUs and memory are consumable: jobs of 1 CPU share the node, --mem is honoured
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
# schedule a batch job as soon as it is submitted or a node frees up (default: up to 3 s later)
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
# finished jobs stay visible to squeue for 5 min (the executor plugin polls squeue)
MinJobAge=300
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
# Already up with this very config: leave it (and the jobs it runs) alone.
if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid" && cmp -s "$CONF.tmp" "$CONF"; then
  state=$(node_state)
  case "$state" in
    idle|mixed|allocated|completing) rm -f "$CONF.tmp"; log "already up (node $state)"; exit 0 ;;
  esac
fi
mv "$CONF.tmp" "$CONF"

# 3. munge (keep a munged that was already running: someone else's)
if ! munge -n </dev/null >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null ||
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; }
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 0755 /run/munge
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n </dev/null >/dev/null 2>&1 || die "munged did not start (see /var/log/munge/munged.log)"
  cp /run/munge/munged.pid "$STATE/munged.pid"
fi

# 4. slurmctld and slurmd (ours restart: the config changed or the node is not well)
for d in slurmd slurmctld; do
  if alive "$STATE/$d.pid"; then
    pid=$(cat "$STATE/$d.pid"); kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
done
log "starting slurmctld and slurmd ($HOST: $CPUS CPUs, $REAL_MEM MB)"
slurmctld -c -i                 # -c: forget old jobs, -i: ignore state save errors
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
scontrol ping >/dev/null 2>&1 || die "slurmctld did not answer (see /var/log/slurm/slurmctld.log)"
slurmd

# 5. wait for the node
for _ in $(seq 300); do
  state=$(node_state)
  [ "$state" = idle ] && break
  case "$state" in
    drain*|down*|fail*) scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.1
done
state=$(node_state)
[ "$state" = idle ] || die "node $HOST is '${state:-unknown}', not idle (see /var/log/slurm/)"
log "up: partition $PARTITION, node $HOST idle"
