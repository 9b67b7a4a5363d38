#!/usr/bin/env bash
# README test command: install dependencies, build everything, run the whole CTest suite.
# REPRO_SANITIZE=1 builds with AddressSanitizer + UBSan into build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
dir=build; extra=()
if [ "${REPRO_SANITIZE:-0}" = "1" ]; then dir=build-asan; extra=(-DREPRO_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo); fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
cd "$dir"
ctest --output-on-failure -j"$(nproc)" "$@"
