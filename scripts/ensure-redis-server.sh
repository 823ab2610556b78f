#!/usr/bin/env bash
# The tests start private redis-server processes; make sure the binary is there.
set -euo pipefail
command -v redis-server >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing redis-server (Debian package) for the tests" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  # Debian's package starts a service on 6379; the tests use their own ports, so leave it as it is
else
  echo "redis-server is missing: run 'sudo apt-get install -y redis-server' and try again" >&2
  exit 1
fi
