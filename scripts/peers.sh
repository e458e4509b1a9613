#!/usr/bin/env bash
# Installs the real peers the end-to-end tests run against, into a cache
# folder outside the clone, and prints the environment that points the tests
# at them (eval "$(scripts/peers.sh)").
#
#   @modelcontextprotocol/server-everything@2026.8.31  (npm)   MCP server
#   llmock==0.2.2                                      (PyPI)  OpenAI-compatible server with fault injection
#   playwright-core@1.65.1                             (npm)   drives Chromium for the dashboard's browser test
#   arize-phoenix==20.26.1                             (PyPI)  OpenTelemetry trace backend the traces are read back from
#   standardwebhooks==1.1.0                            (PyPI)  the webhook receiver's signature check (reference library)
set -euo pipefail
cache="${LEASEHOLD_PEER_CACHE:-$HOME/.cache/leasehold-peers}"
mkdir -p "$cache/npm"

everything="$cache/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
if [ ! -f "$everything" ]; then
  (cd "$cache/npm" && npm init -y >/dev/null 2>&1 && \
   npm install --no-audit --no-fund --loglevel=error -E @modelcontextprotocol/server-everything@2026.8.31 >&2)
fi

playwright_version=1.65.1
playwright="$cache/npm/node_modules"
if ! grep -qs "\"version\": \"$playwright_version\"" "$playwright/playwright-core/package.json"; then
  (cd "$cache/npm" && { [ -f package.json ] || npm init -y >/dev/null 2>&1; } && \
   npm install --no-audit --no-fund --loglevel=error -E "playwright-core@$playwright_version" >&2)
fi

llmock="$cache/venv/bin/llmock"
if [ ! -x "$llmock" ]; then
  python3 -m venv "$cache/venv" >&2
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check llmock==0.2.2 >&2
fi

if ! "$cache/venv/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check standardwebhooks==1.1.0 >&2
fi

phoenix="$cache/phoenix-venv/bin/phoenix"
if [ ! -x "$phoenix" ]; then
  python3 -m venv "$cache/phoenix-venv" >&2
  "$cache/phoenix-venv/bin/pip" install --quiet --disable-pip-version-check arize-phoenix==20.26.1 >&2
fi

echo "export LEASEHOLD_PEER_SERVER_EVERYTHING='$everything'"
echo "export LEASEHOLD_PEER_PHOENIX='$phoenix'"
echo "export LEASEHOLD_PEER_LLMOCK='$llmock'"
echo "export LEASEHOLD_PEER_WEBHOOK_PYTHON='$cache/venv/bin/python'"
echo "export LEASEHOLD_PEER_PLAYWRIGHT='$playwright'"
