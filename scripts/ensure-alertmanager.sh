#!/usr/bin/env bash
# The remediation tests start a private Alertmanager; make sure the binary is there (Debian names it
# prometheus-alertmanager).
set -euo pipefail
command -v alertmanager >/dev/null && exit 0
command -v prometheus-alertmanager >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing prometheus-alertmanager (Debian package) for the tests" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null
  # the package starts a service on 9093 where systemd runs; the tests use their own ports, so leave it
else
  echo "alertmanager is missing: run 'sudo apt-get install -y prometheus-alertmanager' and try again" >&2
  exit 1
fi
