#!/usr/bin/env bash
# Issue 40's import figures, end to end: a real Placement 16 (PyPI
# openstack-placement under uWSGI, noauth2) on MariaDB and on PostgreSQL,
# populated through its own API (scripts/placement-import/populate.py:
# provider trees three deep, sharing providers in aggregates, custom classes
# and traits, consumers with consumer types and generations > 0), then
#   1. berth import placement --from (MariaDB -> berth on SQLite,
#      PostgreSQL -> berth on PostgreSQL): time and peak RSS;
#   2. the same import again: must say "nothing to change";
#   3. berth serve on the imported store (its RSS), and
#      berth import placement --verify against the old Placement: must
#      report 0 differences;
#   4. a claim through berth on an imported NUMA node (as Nova's scheduler
#      claims): up to its capacity succeeds, one unit more is a 409.
#
#   scripts/placement-import-check.sh                  # both backends
#   BACKENDS=mysql ROOTS=300 CONSUMERS=1000 scripts/placement-import-check.sh
#
# Environment: BERTH_BIN (default target/release/berth, built when
# missing), BACKENDS ("mysql postgres"), ROOTS (3,334: 10,022 providers with
# the NUMA nodes, PFs and 20 sharing providers), CONSUMERS (12,500: 51,000 allocation rows), PORT (18978: the old Placement;
# berth on PORT + 1, the old Placement's PostgreSQL on PORT + 10000), VENV
# CONSUMER_THREADS (2: concurrent POST /allocations while populating; more
# only adds generation conflicts the real Placement retries), VERIFY_CONCURRENCY
# (8 requests in flight to each side), PROCESSES and THREADS (the old
# Placement's uWSGI, 4 x 4), VENV
# (/tmp/pvenv: openstack-placement==16.0.0 pyuwsgi psycopg2-binary pymysql,
# made on first use), WORK (/tmp/placement-import-check). Needs MariaDB on
# 127.0.0.1:3306 (root, no password) and PostgreSQL 15 binaries (the old
# Placement's PostgreSQL is a throwaway cluster; berth's goes to
# 127.0.0.1:5432, database berth_import_check, dropped first). Not in
# scripts/test.sh: the real Placement takes minutes to populate.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV=${VENV:-/tmp/pvenv}
BACKENDS=${BACKENDS:-mysql postgres}
ROOTS=${ROOTS:-3334}
CONSUMERS=${CONSUMERS:-12500}
WORK=${WORK:-/tmp/placement-import-check}
BERTH_PG_ADMIN=${BERTH_PG_ADMIN:-postgres://postgres@127.0.0.1:5432}
BERTH_BIN=${BERTH_BIN:-target/release/berth}
[ -x "$BERTH_BIN" ] || cargo build --release --locked -q -p berth
BERTH_BIN=$(readlink -f "$BERTH_BIN")
if [ ! -x "$VENV/bin/uwsgi" ] || ! "$VENV/bin/python" -c 'import pymysql' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q openstack-placement==16.0.0 pyuwsgi psycopg2-binary pymysql
fi
mkdir -p "$WORK"
PORT=${PORT:-18978} BERTH_PORT=$((PORT + 1))
SERVE_PID=
cleanup() {
  [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true
  for b in $BACKENDS; do
    [ -f "$WORK/$b/pids.env" ] && bash scripts/nova/real_placement_server.sh stop "$WORK/$b" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT
failed=0
uuid5() { python3 -c "import uuid,sys; print(uuid.uuid5(uuid.UUID('6ba7b812-9dad-11d1-80b4-00c04fd430c8'), sys.argv[1]))" "$1"; }
for backend in $BACKENDS; do
  echo "== $backend: the real Placement 16"
  MYSQL_DB=placement_import_check PG_PORT=$((PORT + 10000)) \
    bash scripts/nova/real_placement_server.sh start "$backend" "$PORT" "$WORK/$backend" >"$WORK/$backend.env"
  # shellcheck disable=SC1090
  . "$WORK/$backend.env"
  python3 scripts/placement-import/populate.py "$PLACEMENT_URL" --roots "$ROOTS" --consumers "$CONSUMERS" \
    --consumer-threads "${CONSUMER_THREADS:-2}"
  rm -rf "$WORK/berth-$backend"
  if [ "$backend" = mysql ]; then
    FROM=mysql://root@127.0.0.1:3306/placement_import_check
    TARGET=(--data-dir "$WORK/berth-$backend")
  else
    FROM=postgresql://postgres@127.0.0.1:$((PORT + 10000))/placement
    psql "$BERTH_PG_ADMIN/postgres" -q -c "DROP DATABASE IF EXISTS berth_import_check WITH (FORCE)" \
      -c "CREATE DATABASE berth_import_check"
    TARGET=(--data-dir "$WORK/berth-$backend" --database "$BERTH_PG_ADMIN/berth_import_check")
  fi
  echo "== $backend: berth import placement --from $FROM"
  "$BERTH_BIN" import placement --from "$FROM" "${TARGET[@]}"
  echo "== $backend: the same import again"
  again=$("$BERTH_BIN" import placement --from "$FROM" "${TARGET[@]}" 2>&1); echo "$again"
  grep -q "nothing to change" <<<"$again" || { echo "second import changed something" >&2; failed=1; }
  "$BERTH_BIN" serve --listen "127.0.0.1:$BERTH_PORT" "${TARGET[@]}" --log warn >"$WORK/berth-$backend.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 120); do curl -sf -o /dev/null "http://127.0.0.1:$BERTH_PORT/" && break; sleep 0.5; done
  echo "berth serve RSS after loading: $(awk '/VmRSS/ {print int($2/1024) " MiB"}' /proc/$SERVE_PID/status)"
  echo "== $backend: berth import placement --verify"
  agg0=$(uuid5 agg-0)
  if ! "$BERTH_BIN" import placement --verify "$PLACEMENT_URL" --berth "http://127.0.0.1:$BERTH_PORT" \
      --concurrency "${VERIFY_CONCURRENCY:-8}" \
      --candidates CUSTOM_FPGA:1 \
      --candidates "resources=VCPU:1,MEMORY_MB:512&required=CUSTOM_FAST&member_of=$agg0" \
      --candidates "resources=VCPU:1,DISK_GB:10&member_of=$agg0" >"$WORK/verify-$backend.txt"; then
    failed=1; head -20 "$WORK/verify-$backend.txt"
  fi
  echo "== $backend: claims through berth on cn-0-numa0 up to its capacity"
  python3 - "http://127.0.0.1:$BERTH_PORT" "$(uuid5 numa-0)" <<'PY' || failed=1
import json, sys, urllib.request, uuid
base, rp = sys.argv[1], sys.argv[2]
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.38", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")
inv = call("GET", f"/resource_providers/{rp}/inventories")[1]["inventories"]["VCPU"]
capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
used = call("GET", f"/resource_providers/{rp}/usages")[1]["usages"].get("VCPU", 0)
free = capacity - used
claims = 0
def claim(amount):
    return call("PUT", f"/allocations/{uuid.uuid4()}", {"allocations": {rp: {"resources": {"VCPU": amount}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})[0]
left = free
while left > 0:
    amount = min(left, inv["max_unit"])
    assert claim(amount) == 204, "a claim within capacity was refused"
    left -= amount; claims += 1
over = claim(1)
after = call("GET", f"/resource_providers/{rp}/usages")[1]["usages"]["VCPU"]
print(f"VCPU capacity {capacity}, used {used} after import, {claims} claims took the {free} free; one more: {over}; used now {after}")
assert over == 409 and after == capacity, "overcommitted"
PY
  kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=
  bash scripts/nova/real_placement_server.sh stop "$WORK/$backend" >/dev/null
done
if [ "$failed" = 0 ]; then echo "placement-import-check: ok"; else echo "placement-import-check: FAILED" >&2; fi
exit "$failed"
