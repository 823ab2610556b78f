#!/usr/bin/env bash
# Create .venv and install opsgraph into it, on a fresh Debian/Ubuntu machine with Python >= 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "bootstrap: $*" >&2; }
need_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
  if need_root && command -v apt-get >/dev/null; then
    say "installing $* (Debian packages)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    say "missing $*: run 'sudo apt-get install -y $*' and try again"; exit 1
  fi
}

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY="$candidate"; break
    fi
  done
fi
[ -n "$PY" ] || { say "Python >= 3.11 not found: run 'sudo apt-get install -y python3.11 python3.11-venv'"; exit 1; }

if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv >/dev/null 2>&1; then
    rm -rf .venv
    apt_install "python3-venv" "$(basename "$PY")-venv" || true
    "$PY" -m venv .venv
  fi
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch is pinned (==2.13.0) in pyproject.toml: its CPU build lies on this workplace's disk
.venv/bin/python -m pip install -q -e '.[dev]'
touch .venv/.installed
say "installed into .venv"
