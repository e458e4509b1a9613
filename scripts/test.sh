#!/usr/bin/env bash
# The whole test suite: installs the real peers (once, into a cache outside
# the clone), Debian's Chromium for the dashboard's browser test and
# PostgreSQL's server binaries for the PostgreSQL store's tests (when they
# are missing), then runs every test of the workspace against them, and
# ends with the totals.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/peers.sh)"
chromium="${LEASEHOLD_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ]; then
  echo "installing Debian's chromium for the dashboard's browser test" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
# The PostgreSQL store's tests start a throwaway cluster from the installed
# server binaries.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "installing Debian's postgresql for the PostgreSQL store's tests" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
# getting-started.md's commands are run as written, and it posts a flow
# with curl.
if ! command -v curl >/dev/null 2>&1; then
  echo "installing Debian's curl for getting-started.md's commands" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl >/dev/null
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: [a-z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s += $1} END {print s + 0}')
echo
echo "Total: $passed passed, $failed failed"
exit "$status"
