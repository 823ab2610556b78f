#!/usr/bin/env bash
# The console's browser test drives Debian's Chromium through Playwright (never `playwright install`: no browser
# downloads); make sure the binary is there.
set -euo pipefail
command -v chromium >/dev/null && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium (Debian package) for the console's browser test" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
else
  echo "chromium is missing: run 'sudo apt-get install -y chromium' and try again" >&2
  exit 1
fi
