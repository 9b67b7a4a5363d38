#!/usr/bin/env bash
# README main job: install dependencies, build, and run the default audit (`repro-audit run`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target repro-audit
exec build/repro-audit run "$@"
