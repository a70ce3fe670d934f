#!/usr/bin/env bash
# Runs upstream Placement's functional suite (placement-conformance harness,
# expected beside this checkout at ../shared/placement-conformance or at
# $CONFORMANCE_DIR) against berth.
#   scripts/conformance.sh [sqlite|postgres] [extra run.py args...]
# postgres uses $DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres);
# every YAML file gets a fresh schema named after its work directory.
#
#   scripts/conformance.sh compute|compute-extra|image|tempest
# runs upstream Tempest 47's compute (or image v2) API tests against berth
# in Keystone mode (scripts/tempest/: a throwaway Keystone on the local
# PostgreSQL, berth with four fake hosts, the catalog), and fails on any
# failed test; compute-extra is the supplementary configuration (classes
# that only ask for a default network run without Neutron). `tempest`, what
# scripts/test.sh runs: one berth and Keystone for the upstream compute and
# image run, then the supplementary compute run. $BERTH_BIN: the berth
# binary to test (default: a release build made here); $PG_URL: the
# PostgreSQL server of Keystone's throwaway database.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-sqlite}; shift || true
tempest_failed() {
  local work=$1 what=$2
  if [ -s "$work/failing.txt" ]; then
    echo "tempest $what: $(wc -l <"$work/failing.txt") failing (list: $work/failing.txt; console: $work/last-run.txt):" >&2
    cat "$work/failing.txt" >&2
    return 0
  fi
  [ -s "$work/last.csv" ] || { echo "tempest $what: no results (console: $work/last-run.txt)" >&2; return 0; }
  return 1
}
case "$backend" in
  compute|compute-extra|image|tempest|upstream)
    if [ -z "${BERTH_BIN:-}" ]; then
      cargo build --release --locked -q
      BERTH_BIN="$PWD/target/release/berth"
    fi
    BERTH_BIN=$(readlink -f "$BERTH_BIN")
    export BERTH_BIN
    work=${TEMPEST_WORK:-/tmp/tempest-work}
    export TEMPEST_WORK=$work
    trap 'bash scripts/tempest/run_tempest.sh stop' EXIT
    bash scripts/tempest/run_tempest.sh start
    status=0
    case "$backend" in
      tempest)
        bash scripts/tempest/run_tempest.sh run '^tempest\.api\.(compute|image)'
        bash scripts/tempest/run_tempest.sh summary
        cp "$work/skips.txt" "$work/skips-upstream.txt" 2>/dev/null || true
        if tempest_failed "$work" "compute+image (upstream configuration)"; then status=1; fi
        bash scripts/tempest/run_tempest.sh extra '^tempest\.api\.compute'
        bash scripts/tempest/run_tempest.sh summary
        if tempest_failed "$work" "compute (supplementary run)"; then status=1; fi ;;
      upstream)
        bash scripts/tempest/run_tempest.sh run '^tempest\.api\.(compute|image)'
        bash scripts/tempest/run_tempest.sh summary
        if tempest_failed "$work" "compute+image (upstream configuration)"; then status=1; fi ;;
      compute-extra)
        bash scripts/tempest/run_tempest.sh extra '^tempest\.api\.compute'
        bash scripts/tempest/run_tempest.sh summary
        if tempest_failed "$work" compute-extra; then status=1; fi ;;
      *)
        if [ "$backend" = image ]; then regex='^tempest\.api\.image\.v2'; else regex='^tempest\.api\.compute'; fi
        bash scripts/tempest/run_tempest.sh run "$regex"
        bash scripts/tempest/run_tempest.sh summary
        if tempest_failed "$work" "$backend"; then status=1; fi ;;
    esac
    exit $status ;;
esac
harness=${CONFORMANCE_DIR:-../shared/placement-conformance}
cargo build --release --locked -q
bin="$PWD/target/release/berth"
common="--listen 127.0.0.1:{port} --data-dir {workdir} --policy-file {policy_file} --cors-allowed-origin \"{cors_origin}\" --cors-allow-headers \"{cors_allow_headers}\""
case "$backend" in
  sqlite) cmd="exec $bin serve $common" ;;
  postgres)
    url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
    sep='?'; case "$url" in *\?*) sep='&';; esac
    run=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    cmd="exec $bin serve $common --database \"$url${sep}schema=conf_${run}_\$(echo {workdir} | md5sum | cut -c1-16)\"" ;;
  *) echo "usage: $0 [sqlite|postgres] [run.py args]" >&2; exit 2 ;;
esac
status=0
python3 "$harness/run.py" --server-cmd "$cmd" "$@" || status=$?
# This run's schemas (and their cells'), when psql is at hand.
if [ "$backend" = postgres ] && command -v psql >/dev/null 2>&1; then
  base=${url%%\?*}
  psql "$base" -Atqc "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'conf\_${run}\_%'" 2>/dev/null |
    while read -r schema; do psql "$base" -qc "DROP SCHEMA IF EXISTS \"$schema\" CASCADE" >/dev/null 2>&1 || true; done
fi
exit $status
