#!/usr/bin/env bash
# Runs upstream Placement's functional suite (placement-conformance harness,
# expected beside this checkout at ../shared/placement-conformance or at
# $CONFORMANCE_DIR) against berth.
#   scripts/conformance.sh [sqlite|postgres] [extra run.py args...]
# postgres uses $DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres);
# every YAML file gets a fresh schema named after its work directory.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-sqlite}; shift || true
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
