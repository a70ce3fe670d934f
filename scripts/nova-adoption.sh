#!/usr/bin/env bash
# berth adopted under a running Nova (issue 40; docs/PLACEMENT.md, "Adopting
# berth under an existing Nova"), as an operator does it:
#   1. an unmodified Nova 34 (two nova-compute processes with two fake nodes
#      each, 2 VCPU per node at allocation ratio 4.0: 8 VCPU of capacity per
#      node) on the real Placement 16 on MariaDB; servers booted on it
#      (scripts/nova/adoption.py before: 5 x 1 VCPU, 3 x 2 VCPU);
#   2. the old Placement stopped; `berth import placement --from` its
#      database (time, peak RSS), and again (nothing to change);
#   3. berth serving the import on its own port; the old Placement started
#      again on a private port nothing else knows, and `berth import
#      placement --verify` (with Nova's flavors, --nova-db) must report 0
#      differences; the old Placement stopped for good;
#   4. the switch: Nova's [placement] endpoint becomes berth's in every
#      config and its API, conductor, scheduler and computes restart
#      (scripts/nova/nova_on_berth.sh switch);
#   5. scripts/nova/adoption.py after: the earlier allocations intact in
#      berth, boots until the nodes are full (as many ACTIVE as the free
#      capacity the import left, the next one "No valid host", usage equal
#      to capacity on every node), one earlier server deleted: its
#      allocation released in berth.
#
#   scripts/nova-adoption.sh
#
# Environment: BERTH_BIN (default target/release/berth, built when
# missing), WORK (/tmp/nova-adoption), PRE_SMALL (5), PRE_BIG (3),
# NOVA_FAKE_VCPUS (2). The harness is scripts/nova/ (venvs under /tmp on
# first use, state in /tmp/nova-oracle, Nova's Placement endpoint
# 127.0.0.1:18778, berth on 18780, the old Placement's second life on
# 18977); MariaDB (database placement_adoption) and RabbitMQ as the machine
# runs them. Not in scripts/test.sh (5-15 minutes, needs MariaDB,
# RabbitMQ and PyPI on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
BERTH_BIN=${BERTH_BIN:-target/release/berth}
[ -x "$BERTH_BIN" ] || cargo build --release --locked -q -p berth
BERTH_BIN=$(readlink -f "$BERTH_BIN")
W=${WORK:-/tmp/nova-adoption}
H=scripts/nova
DB=placement_adoption
BERTH_PORT=18780 OLD_PORT=18977
export PLACEMENT=real REAL_BACKEND=mysql MYSQL_DB=$DB NOVA_FAKE_VCPUS=${NOVA_FAKE_VCPUS:-2}
rm -rf "$W"; mkdir -p "$W"
cleanup() {
  [ -f "$W/old/pids.env" ] && bash $H/real_placement_server.sh stop "$W/old" >/dev/null 2>&1 || true
  bash $H/nova_on_berth.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
echo "== Nova 34 on the real Placement 16 (MariaDB)"
START=$(bash $H/nova_on_berth.sh start 2 2)
set -a; eval "$START"; set +a
python3 $H/adoption.py before --state "$W/before.json" --small "${PRE_SMALL:-5}" --big "${PRE_BIG:-3}"

echo "== the old Placement stopped; berth import placement --from its database"
bash $H/real_placement_server.sh stop "$NOVA_STATE/placement" >/dev/null
FROM=mysql://root@127.0.0.1:3306/$DB
"$BERTH_BIN" import placement --from "$FROM" --data-dir "$W/berth-data"   # prints its time and peak RSS
again=$("$BERTH_BIN" import placement --from "$FROM" --data-dir "$W/berth-data" 2>&1); echo "$again"
grep -q "nothing to change" <<<"$again" || { echo "the second import changed something" >&2; exit 1; }

echo "== berth on :$BERTH_PORT; the old Placement again on :$OLD_PORT (private) for the comparison"
"$BERTH_BIN" serve --listen 127.0.0.1:$BERTH_PORT --data-dir "$W/berth-data" --log warn >"$W/berth.log" 2>&1 &
echo "BERTH_PID=$!" >>"$NOVA_STATE/pids"   # nova_on_berth.sh stop stops it with the rest
for _ in $(seq 100); do curl -s -o /dev/null -m 2 http://127.0.0.1:$BERTH_PORT/ && break; sleep 0.2; done
KEEP_DB=1 bash $H/real_placement_server.sh start mysql $OLD_PORT "$W/old" >/dev/null
"$BERTH_BIN" import placement --verify http://127.0.0.1:$OLD_PORT --berth http://127.0.0.1:$BERTH_PORT \
  --nova-db mysql://root@127.0.0.1:3306/nova_api --concurrency 4
bash $H/real_placement_server.sh stop "$W/old" >/dev/null

echo "== the switch: Nova's [placement] endpoint is berth's; Nova restarts on it"
switched=$(date -u +%Y-%m-%dT%H:%M:%S)
bash $H/nova_on_berth.sh switch http://127.0.0.1:$BERTH_PORT >/dev/null
# Every compute up again (a heartbeat after the restart) before the boots.
for _ in $(seq 120); do
  up=$(curl -s -H 'X-Auth-Token: admin' "$NOVA_URL/os-services?binary=nova-compute" | python3 -c "
import sys, json
print(sum(s['state'] == 'up' and (s['updated_at'] or '') > sys.argv[1] for s in json.load(sys.stdin)['services']))
" "$switched" 2>/dev/null || echo 0)
  [ "${up:-0}" -ge 2 ] && break; sleep 1
done
python3 $H/adoption.py after --state "$W/before.json" --placement http://127.0.0.1:$BERTH_PORT
echo "nova-adoption: ok"
