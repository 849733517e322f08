#!/usr/bin/env bash
# Create the public base images that sforge's Dockerfiles name, when no registry can be
# reached: a machine without registry access gets local stand-ins under the exact names
# (never edit a Dockerfile to suit the machine). An image that exists or can be pulled
# is left alone.
set -euo pipefail

ENV_PATH='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

have() { docker image inspect "$1" >/dev/null 2>&1 || timeout 60 docker pull -q "$1" >/dev/null 2>&1; }

# busybox:1.36 — used by the test fixtures: a static busybox, its applets as links.
make_busybox() {
  local name=busybox:1.36 root
  have "$name" && return 0
  command -v busybox >/dev/null || { apt-get update -qq; apt-get install -y -qq busybox-static >/dev/null; }
  root=$(mktemp -d)
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,tmp,etc,root,opt}
  cp "$(command -v busybox)" "$root/bin/busybox"
  chroot "$root" /bin/busybox --install -s
  chmod 1777 "$root/tmp"
  echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
  echo 'root:x:0:' > "$root/etc/group"
  tar -C "$root" -c . | docker import -c "$ENV_PATH" -c 'CMD ["sh"]' - "$name" >/dev/null
  rm -rf "$root"
  echo "created $name (static busybox)"
}

# python:3.11-slim-bookworm — EdgeBench's pinned Python base: Debian bookworm with python3.
make_python() {
  local name=python:3.11-slim-bookworm root
  have "$name" && return 0
  command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
  root=$(mktemp -d)
  debootstrap --variant=minbase --include=python3 bookworm "$root" http://deb.debian.org/debian >/dev/null
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" 2>/dev/null || true
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | docker import -c "$ENV_PATH" -c 'CMD ["python3"]' - "$name" >/dev/null
  rm -rf "$root"
  echo "created $name (debootstrap bookworm + python3)"
}

make_busybox
make_python
