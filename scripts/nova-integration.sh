#!/usr/bin/env bash
# An unmodified Nova 34 (its WSGI API, conductor and scheduler with two
# workers each, two nova-compute processes with four fake nodes each,
# MariaDB and RabbitMQ as the machine runs them) with berth as its
# Placement, and three bursts of 30 concurrent boots. Fails when a boot
# does not end ACTIVE, or Nova's scheduler or conductor logs a KeyError
# (the symptom of forked workers sharing one live Placement connection).
#
#   scripts/nova-integration.sh                 # berth (target/release/berth)
#   PLACEMENT=real scripts/nova-integration.sh  # the real Placement 16, for comparison
#
# Environment: BERTH_BIN (default target/release/berth, built when
# missing), BURSTS (3), BURST_SIZE (30), SCHED_WORKERS and COND_WORKERS (2).
# The harness in scripts/nova/ is the recipe of ../shared/nova-reference
# (copied; its multi-node driver names corrected): venvs under /tmp on
# first use (PyPI), state in /tmp/nova-oracle, Placement on 127.0.0.1:18778.
# Not in scripts/test.sh: a run takes 5-10 minutes and needs MariaDB and
# RabbitMQ.
set -euo pipefail
cd "$(dirname "$0")/.."
export PLACEMENT=${PLACEMENT:-berth} SCHED_WORKERS=${SCHED_WORKERS:-2} COND_WORKERS=${COND_WORKERS:-2}
BURSTS=${BURSTS:-3}
BURST_SIZE=${BURST_SIZE:-30}
if [ "$PLACEMENT" = berth ]; then
  BERTH_BIN=${BERTH_BIN:-target/release/berth}
  [ -x "$BERTH_BIN" ] || cargo build --release --locked -q -p berth
  BERTH_BIN=$(readlink -f "$BERTH_BIN")
  export BERTH_BIN
fi
H=scripts/nova
trap 'bash $H/nova_on_berth.sh stop >/dev/null 2>&1 || true' EXIT
START=$(bash $H/nova_on_berth.sh start 2 4)
set -a; eval "$START"; set +a
keyerrors() {
  cat "$NOVA_STATE"/log/nova-scheduler.log "$NOVA_STATE"/log/nova-conductor.log \
      "$NOVA_STATE"/log/scheduler.out "$NOVA_STATE"/log/conductor.out 2>/dev/null | grep -c KeyError || true
}
failed=0
for burst in $(seq 1 "$BURSTS"); do
  echo "== burst $burst of $BURST_SIZE ($PLACEMENT)"
  out=$(python3 $H/burst.py -n "$BURST_SIZE" -c "$BURST_SIZE" --timeout 300 \
          --sched-log "$NOVA_STATE/log/nova-scheduler.log" --pids-file "$NOVA_STATE/pids" 2>&1) || failed=1
  echo "$out"
  echo "$out" | grep -q "ACTIVE $BURST_SIZE, ERROR 0, unsettled 0" || { echo "burst $burst: not all ACTIVE" >&2; failed=1; }
  sleep 8
done
n_keyerrors=$(keyerrors)
echo "KeyError lines in Nova's scheduler and conductor logs: $n_keyerrors"
[ "$n_keyerrors" = 0 ] || failed=1
if [ "$failed" = 0 ]; then echo "nova-integration: ok"; else echo "nova-integration: FAILED" >&2; fi
exit "$failed"
