#!/usr/bin/env bash
# Runs upstream Placement's functional suite (placement-conformance harness,
# expected beside this checkout at ../shared/placement-conformance or at
# $CONFORMANCE_DIR) against berth.
#   scripts/conformance.sh [sqlite|postgres] [extra run.py args...]
# postgres uses $DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres);
# every YAML file gets a fresh schema named after its work directory.
#
#   scripts/conformance.sh compute|compute-extra|image
# runs upstream Tempest 47's compute (or image v2) API tests against berth
# in Keystone mode (scripts/tempest/: a throwaway Keystone on the local
# PostgreSQL, berth with four fake hosts, the catalog), and fails on any
# failed test; compute-extra is the supplementary configuration (resize
# on, classes that only ask for a default network run without Neutron).
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-sqlite}; shift || true
case "$backend" in
  compute|compute-extra|image)
    cargo build --release --locked -q
    case "$backend" in
      image) regex='^tempest\.api\.image\.v2' ;;
      *) regex='^tempest\.api\.compute' ;;
    esac
    export BERTH_BIN="$PWD/target/release/berth"
    work=${TEMPEST_WORK:-/tmp/tempest-work}
    trap 'bash scripts/tempest/run_tempest.sh stop' EXIT
    bash scripts/tempest/run_tempest.sh start
    if [ "$backend" = compute-extra ]; then
      bash scripts/tempest/run_tempest.sh extra "$regex"
    else
      bash scripts/tempest/run_tempest.sh run "$regex"
    fi
    bash scripts/tempest/run_tempest.sh summary
    if [ -s "$work/failing.txt" ]; then
      echo "tempest: $(wc -l <"$work/failing.txt") failing (list: $work/failing.txt; console: $work/last-run.txt)" >&2
      exit 1
    fi
    exit 0 ;;
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
