#!/bin/sh
# Nightly drift alarm: re-run the golden run's plan and route the canary's exit status.
#   crontab: 0 3 * * *  /path/to/canary-cron.sh /srv/audit/golden /srv/audit/canary
# Exit status of `repro-audit canary` (README, "Exit status"):
#   0 GREEN    identical to the baseline: nothing to do
#   1 YELLOW   bit-level or answer-preserving drift: a warning
#   5 RED      token or answer drift, another model, cases missing, a failed rerun: page someone
#   2          usage error (a typo in this file, a damaged or edited baseline): the job is broken
#   3          the rerun could not start (engine, endpoint down): the job is broken
# REPRO_AUDIT: the binary (default: repro-audit on PATH). Set NOTIFY to a command that takes the message as its arguments (default: print it).
set -u
GOLDEN=${1:?usage: canary-cron.sh GOLDEN_DIR OUT_ROOT}
OUT_ROOT=${2:?usage: canary-cron.sh GOLDEN_DIR OUT_ROOT}
NOTIFY=${NOTIFY:-echo}
OUT="$OUT_ROOT/canary-$(date +%F)"

"${REPRO_AUDIT:-repro-audit}" canary --baseline "$GOLDEN" --out "$OUT" --quiet
code=$?
case $code in
  0) ;;
  1) $NOTIFY "canary YELLOW: bit-level drift, see $OUT/canary.json" ;;
  5) $NOTIFY "PAGE canary RED: outputs drifted from $GOLDEN, see $OUT/canary.json" ;;
  2) $NOTIFY "canary job broken (usage error): fix the command or the baseline" ;;
  *) $NOTIFY "canary job broken (exit $code): the rerun could not run" ;;
esac
exit $code
