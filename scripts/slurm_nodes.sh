#!/usr/bin/env bash
# A multi-node SLURM cluster on this one machine, each compute node with its OWN Docker
# daemon, and a registry on loopback: what a real cluster has and a one-node test cluster
# does not (nodes start without the judge images and pull them from the registry).
#
#   bash scripts/slurm_nodes.sh up [N]      N compute nodes (default 2), registry, controller
#   bash scripts/slurm_nodes.sh env         print the exports to use the cluster (eval it)
#   bash scripts/slurm_nodes.sh kill NODE   power a node off (SIGKILL: slurmd, its jobs, its dockerd)
#   bash scripts/slurm_nodes.sh start NODE  power it on again (its daemon keeps its images and
#                                           whatever containers the killed jobs left)
#   bash scripts/slurm_nodes.sh down        stop everything, remove the node daemons' data
#
# A node is a set of Linux namespaces (mount, UTS, PID; `unshare`, as root; no privileged
# container): its own hostname (n1, n2, ...), its own dockerd (--data-root, socket, exec-root
# and bridge of its own; no iptables) bind-mounted at /var/run/docker.sock, and a
# `slurmd -N <node>` listening on its own port. The network and the filesystem are the
# host's, so the repository, .venv, benchmarks and results are "shared at the same path" as
# on a real cluster. Killing a node kills its PID namespace: slurmd, the jobs, the judge
# containers and the node's dockerd die at once, as at a power cut.
#
# The config lives at $SFORGE_NODES_STATE/slurm.conf (default /run/sforge-nodes), NOT
# /etc/slurm/slurm.conf: clients find it through SLURM_CONF (`eval "$(... env)"`), which
# also shows that sbatch, squeue and a whole `sforge grade --profile slurm` run work with
# SLURM_CONF. Ports: controller 6917, nodes 6921+ (the one-node cluster of slurm_up.sh uses
# 6817/6818; both can run at once). SlurmdTimeout is 10 s so a dead node is noticed fast
# (SLURM's default is 300 s). Needs docker.io and docker-registry; slurm-wlm and munge are
# installed when missing. What it shares with scripts/slurm_up.sh (packages, munge, most of
# slurm.conf, starting slurmctld, waiting for nodes) is in scripts/slurm_lib.sh.
set -euo pipefail
SLURM_LIB_NAME=slurm_nodes
. "$(dirname "$0")/slurm_lib.sh"

STATE="${SFORGE_NODES_STATE:-/run/sforge-nodes}"
DATA="${SFORGE_NODES_DATA:-/var/lib/sforge-nodes}"     # node daemons' images (on disk)
REGISTRY_PORT="${SFORGE_NODES_REGISTRY_PORT:-5077}"
CTLD_PORT=6917
NODE_PORT0=6921
CONF="$STATE/slurm.conf"
MUNGE_SOCKET="$STATE/munge/munge.socket"
PARTITION=nodes
export SLURM_CONF="$CONF"

[ "$(id -u)" = 0 ] || die "must run as root (starts daemons, makes namespaces)"
cmd="${1:-}"; shift || true

nodes() { [ -s "$STATE/nodes" ] && cat "$STATE/nodes"; }

power_off() {  # NODE: SIGKILL its unshare (which ignores TERM): --kill-child takes the rest
  local f="$STATE/$1/node.pid"
  [ -s "$f" ] || return 0
  kill -KILL "$(cat "$f")" 2>/dev/null || true
  for _ in $(seq 100); do alive "$f" || break; sleep 0.1; done
  rm -f "$f" "$STATE/$1/ready"
}

start_node() {  # the node's namespaces, its dockerd, its slurmd
  local node=$1 i=$2 dir="$STATE/$1"
  mkdir -p "$dir" "$DATA/$node"
  alive "$dir/node.pid" && { log "$node already up"; return 0; }
  # runtime state left by a kill (the data root keeps images and containers)
  rm -rf "$dir/docker.sock" "$dir/ready" "$dir/dockerd.pid" "$dir/exec"
  # The node's dockerd gets a bridge of its own. Never `--bridge none`: a dockerd started
  # with it deletes the interface docker0 of the host's network namespace, i.e. breaks the
  # host's own Docker daemon. Judges run with --network none anyway; no iptables rules.
  local br="sfn-$node"
  if ! ip link show "$br" >/dev/null 2>&1; then
    ip link add "$br" type bridge
    ip addr add "10.231.$i.1/24" dev "$br"
    ip link set "$br" up
  fi
  # --kill-child: when the unshare process dies its child (PID 1 of the node) does too,
  # and with it every process of the node's PID namespace.
  setsid unshare --mount --uts --pid --fork --kill-child --mount-proc --propagation private \
    bash -c '
      set -e
      node=$1; dir=$2; data=$3; conf=$4
      hostname "$node"
      dockerd --data-root "$data/docker" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
        --host "unix://$dir/docker.sock" --bridge "sfn-$node" --iptables=false --ip-masq=false \
        >"$dir/dockerd.log" 2>&1 &
      up() { curl -fs --unix-socket "$dir/docker.sock" http://docker/_ping >/dev/null 2>&1; }
      for _ in $(seq 600); do up && break; sleep 0.1; done
      up || { echo "dockerd of $node did not start" >&2; exit 1; }
      touch /var/run/docker.sock 2>/dev/null || true
      mount --bind "$dir/docker.sock" /var/run/docker.sock
      touch "$dir/ready"
      exec slurmd -D -N "$node" -f "$conf"
    ' sforge-node "$node" "$dir" "$DATA/$node" "$CONF" >"$dir/node.log" 2>&1 &
  echo $! > "$dir/node.pid"
  for _ in $(seq 300); do [ -e "$dir/ready" ] && break; alive "$dir/node.pid" || break; sleep 0.1; done
  [ -e "$dir/ready" ] || die "node $node did not start: $(tail -5 "$dir/node.log" "$dir/dockerd.log" 2>/dev/null)"
  log "node $node up (dockerd unix://$dir/docker.sock, slurmd port $((NODE_PORT0 + i - 1)))"
}

case "$cmd" in
up)
  n="${1:-2}"
  install_slurm
  for tool in dockerd docker-registry unshare; do
    command -v "$tool" >/dev/null || die "$tool missing: apt-get install docker.io docker-registry"
  done
  mkdir -p "$STATE" "$DATA"
  start_munged "$STATE/munge"

  # the registry, on loopback only
  if ! alive "$STATE/registry.pid"; then
    mkdir -p "$DATA/registry"
    cat > "$STATE/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $DATA/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
YML
    docker-registry serve "$STATE/registry.yml" >"$STATE/registry.log" 2>&1 &
    echo $! > "$STATE/registry.pid"
    for _ in $(seq 100); do curl -fs "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null && break; sleep 0.1; done
    curl -fs "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null || die "registry did not start: $(tail -3 "$STATE/registry.log")"
  fi

  names=(); for i in $(seq "$n"); do names+=("n$i"); done
  cpus=$(nproc)
  mem=$(( $(free -m | awk '/^Mem:/ {print $2}') * 90 / 100 / n ))
  host=$(hostname -s)
  {
    echo "# written by sforge scripts/slurm_nodes.sh: $n compute nodes with their own dockerd"
    cat <<CONF
ClusterName=sforgenodes
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
# a requeued job waits cred_expire seconds before it may start again (SLURM's default: 120)
AuthInfo=cred_expire=15,socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/%n/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/%n/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/%n/slurmd.log
# a dead node is noticed after this many seconds (SLURM's default: 300)
SlurmdTimeout=10
CONF
    slurm_conf_shared
    i=0
    for node in "${names[@]}"; do
      i=$((i + 1))
      echo "NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 Port=$((NODE_PORT0 + i - 1)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=$PARTITION Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP"
  } > "$CONF.tmp"
  if alive "$STATE/slurmctld.pid" && cmp -s "$CONF.tmp" "$CONF"; then
    rm -f "$CONF.tmp"
  else
    mv "$CONF.tmp" "$CONF"
    for node in $(nodes); do power_off "$node"; done
    stop_pid "$STATE/slurmctld.pid"
    mkdir -p "$STATE/ctld"
    log "starting slurmctld (port $CTLD_PORT, config $CONF)"
    start_slurmctld -f "$CONF"
  fi
  printf '%s\n' "${names[@]}" > "$STATE/nodes"
  i=0
  for node in "${names[@]}"; do
    i=$((i + 1))
    if ! alive "$STATE/$node/node.pid"; then
      rm -rf "${DATA:?}/$node"    # every node daemon starts without images
      start_node "$node" "$i"
    fi
  done
  wait_idle "${names[@]}"
  log "up: partition $PARTITION, nodes ${names[*]} idle; registry 127.0.0.1:$REGISTRY_PORT"
  log 'use it: eval "$(bash scripts/slurm_nodes.sh env)"'
  ;;
env)
  echo "export SLURM_CONF=$CONF"
  echo "export SFORGE_REGISTRY=127.0.0.1:$REGISTRY_PORT"
  ;;
kill)
  node="${1:?usage: slurm_nodes.sh kill NODE}"
  [ -s "$STATE/$node/node.pid" ] || die "no node $node"
  power_off "$node"
  log "node $node killed"
  ;;
start)
  node="${1:?usage: slurm_nodes.sh start NODE}"
  i=$(grep -nx "$node" "$STATE/nodes" | cut -d: -f1)
  [ -n "$i" ] || die "no node $node"
  start_node "$node" "$i"
  wait_idle "$node"
  ;;
down)
  if alive "$STATE/slurmctld.pid"; then
    timeout 10 scancel --full --quiet --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  # everything below is thrown away: no need to wait for a graceful stop
  for node in $(nodes); do power_off "$node"; done
  kill -KILL "$(cat "$STATE/slurmctld.pid" 2>/dev/null)" 2>/dev/null || true
  stop_pid "$STATE/slurmctld.pid"
  stop_pid "$STATE/registry.pid"
  stop_pid "$STATE/munge/munged.pid"
  # the node daemons' exec roots hold mounts only while they run; their data goes too
  for node in $(nodes); do
    rm -rf "${DATA:?}/$node"
    ip link del "sfn-$node" 2>/dev/null || true
  done
  rm -rf "${DATA:?}/registry" "$STATE"
  log "down"
  ;;
*)
  sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
