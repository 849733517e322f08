# Shared by the test-cluster scripts (sourced, not run): scripts/slurm_up.sh (this machine as
# a one-node cluster), scripts/slurm_nodes.sh (several nodes, each with its own dockerd) and
# scripts/slurm_down.sh. One place for the packages, munge, the slurm.conf settings both
# clusters share, starting slurmctld, pid files and waiting for nodes.
#
# The sourcing script sets SLURM_LIB_NAME (its name in messages) first.

log() { printf '%s: %s\n' "${SLURM_LIB_NAME:-slurm}" "$*" >&2; }
die() { log "$*"; exit 1; }
running() {  # PID: the process exists and is not a zombie (this machine's init reaps late)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
alive() { [ -s "$1" ] && running "$(cat "$1")"; }

stop_pid() {  # PIDFILE: TERM, up to 5 s, then KILL; the pid file goes
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if running "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then
      log "$(basename "$f" .pid) ($pid) ignored TERM, killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
}

install_slurm() {  # [EXTRA_PACKAGE...]: slurm-wlm, munge (and these) from Debian when missing
  local missing=() pkg had_policy=0
  for pkg in slurm-wlm munge "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  # policy-rc.d: the packages' postinst must not start daemons with a config we replace.
  if [ -e /usr/sbin/policy-rc.d ]; then had_policy=1
  else printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || { [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d; die "apt-get install ${missing[*]} failed"; }
  [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
}

start_munged() {  # DIR: a munged of the cluster's own, socket DIR/munge.socket, pid DIR/munged.pid
  # Its own socket (named in slurm.conf's AuthInfo): no other cluster or munged on this
  # machine can stop it under us, and we never stop theirs.
  local dir=$1
  alive "$dir/munged.pid" && return 0
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null ||
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; }
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  mkdir -p "$dir"; chown munge:munge "$dir"; chmod 0755 "$dir"
  rm -f "$dir/munged.pid"
  runuser -u munge -- /usr/sbin/munged --socket="$dir/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"
  for _ in $(seq 50); do [ -s "$dir/munged.pid" ] && break; sleep 0.1; done
  [ -s "$dir/munged.pid" ] || die "munged did not start (see $dir/munged.log)"
}

slurm_conf_shared() {  # the slurm.conf settings both test clusters share
  cat <<'CONF'
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# no cgroups (containers, gVisor): plain process tracking, no task confinement
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
# CPUs and memory are consumable: jobs of 1 CPU share a node, --mem is honoured
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
# schedule a batch job as soon as it is submitted or a node frees up (default: up to 3 s later)
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
# finished jobs stay visible to squeue for 5 min (the executor plugin polls squeue)
MinJobAge=300
ReturnToService=2
InactiveLimit=0
KillWait=5
CONF
}

start_slurmctld() {  # [slurmctld ARGS...]: start it afresh (-c: forget old jobs) and wait for it
  slurmctld -c -i "$@"
  for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
  scontrol ping >/dev/null 2>&1 || die "slurmctld did not answer (see its SlurmctldLogFile)"
}

wait_idle() {  # NODE...: until sinfo shows each idle (RESUME what SLURM set down or drained)
  local node state
  for node in "$@"; do
    for _ in $(seq 300); do
      state=$(sinfo -h -N -n "$node" -o %T 2>/dev/null | head -n1)
      [ "$state" = idle ] && break
      case "$state" in
        down*|drain*|fail*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
      esac
      sleep 0.2
    done
    [ "$state" = idle ] || die "node $node is '${state:-unknown}', not idle (see the slurmd log)"
  done
}
