#!/usr/bin/env bash
# Installs the Debian packages repro-audit builds and tests with. Idempotent; needs root (or sudo).
set -euo pipefail
PKGS=(cmake make g++ pkg-config git libcli11-dev libfmt-dev nlohmann-json3-dev doctest-dev
      libcurl4-openssl-dev libssl-dev libopenblas-dev libcpp-httplib-dev libpcre2-dev
      libsqlite3-dev)
# Test-only extras: clang + libFuzzer runtime for the fuzz targets, Chromium for the HTML check,
# the openssl and sqlite3 command lines and securesystemslib (independent checks of signed reports
# and of the archive), Node.js for the OpenAI client test (its npm package `openai` is not a Debian
# package: `npm install openai` in ../.npm-openai; the test skips without it).
if [ "${1:-}" = "--test" ]; then
  PKGS+=(clang libclang-rt-14-dev chromium openssl sqlite3 python3 python3-securesystemslib nodejs)
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
