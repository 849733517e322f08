#!/usr/bin/env bash
# Set up a fresh machine for sforge: Docker engine (Debian's docker.io when `docker info`
# fails), dockerd in the background, local stand-ins for public base images that cannot be
# pulled, a virtualenv with sforge installed, and the extra tools the tests use.
# Idempotent: every step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
APT_UPDATED=
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then log "need root to install: ${missing[*]}"; return 1; fi
  [ -n "$APT_UPDATED" ] || { apt-get update -qq; APT_UPDATED=1; }
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# 1. Docker engine
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || apt_install docker.io
  if ! pgrep -x dockerd >/dev/null; then
    log "starting dockerd"
    nohup dockerd >/var/log/sforge-dockerd.log 2>&1 &
  fi
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not start; see /var/log/sforge-dockerd.log"; exit 1; }
fi

# 2. Base images the Dockerfiles name (local stand-ins when no registry answers)
bash scripts/setup_base_images.sh

# 3. Tools for the tests: a real registry, headless Chromium, SLURM
if [ "${SFORGE_SETUP_TEST_TOOLS:-1}" = 1 ]; then
  apt_install docker-registry chromium slurm-wlm munge zsh || log "could not install test tools (tests will say so)"
fi

# 4. The project in a virtualenv
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import sforge, pytest" >/dev/null 2>&1 || [ pyproject.toml -nt .venv/.installed ]; then
  log "installing sforge into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
  touch .venv/.installed
fi
# Bytecode of the package, as a wheel install has it: an editable install writes none while
# PYTHONDONTWRITEBYTECODE is set, and every command would then compile sforge from source.
# (A stale file is only ever recompiled in memory: harmless.)
.venv/bin/python -m compileall -q sforge >/dev/null
# The SLURM executor of profiles/slurm (a regular install: Snakemake finds executor
# plugins among installed top-level packages)
if [ -d profiles/slurm/plugin ] && { ! .venv/bin/python -c "import snakemake_executor_plugin_sforge_slurm" >/dev/null 2>&1 \
     || [ profiles/slurm/plugin/snakemake_executor_plugin_sforge_slurm/__init__.py -nt .venv/.slurm-plugin ]; }; then
  log "installing the sforge-slurm executor plugin"
  .venv/bin/pip install -q --disable-pip-version-check ./profiles/slurm/plugin
  touch .venv/.slurm-plugin
fi

# 5. The in-container helper (sforge-submit + relay): one static Go binary, stdlib only
command -v go >/dev/null || apt_install golang-go
.venv/bin/python -c "from sforge.runs.helper import helper_binary; helper_binary()"

# 6. Agent bundles (agents/<name>/agent.toml): the native claude-code and codex CLIs from npm,
# musl's loader and bash-static from Debian, assembled once into ~/.cache/sforge (or
# $SFORGE_CACHE) and mounted read-only into work containers; nothing installs in a container.
apt_install musl bash-static
command -v npm >/dev/null || apt_install npm
if [ "${SFORGE_SETUP_AGENTS:-1}" = 1 ]; then
  .venv/bin/sforge agents --prepare claude-code codex >/dev/null
fi

# 7. EdgeBench's blobs, built from the sources in git and served over file://
if [ -f edgebench/blobs-src/make_blobs.py ]; then
  .venv/bin/python edgebench/blobs-src/make_blobs.py >/dev/null
fi
log "ready"
