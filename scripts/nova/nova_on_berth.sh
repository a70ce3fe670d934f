#!/usr/bin/env bash
# Real, unmodified Nova 34.0.0 control plane on this machine with berth as its Placement service (nova_reference.sh
# with PLACEMENT=berth|real; only the Placement part differs).
#
#   [PLACEMENT=berth|real] nova_on_berth.sh start [N_COMPUTES=2] [NODES_PER_COMPUTE=1]
#       prints NOVA_URL PLACEMENT_URL IMAGE_URL NEUTRON_URL IMAGE_ID OS_CLIENT_CONFIG_FILE OS_CLOUD and every
#       started PID as shell assignments (eval "$(nova_on_berth.sh start 2)")
#   nova_on_berth.sh stop      stops exactly what start started: the recorded PIDs and their descendants
#   nova_on_berth.sh pids      prints the recorded assignments
#   nova_on_berth.sh switch URL   Nova's [placement] endpoint becomes URL; API, conductor, scheduler and computes
#                                 restart on it (the adoption's switch, scripts/nova-adoption.sh)
#
# Placement on 127.0.0.1:18778 is chosen by PLACEMENT (default berth):
#   berth: `$BERTH_BIN serve --listen 127.0.0.1:18778 --data-dir $S/berth-data` (fresh SQLite data dir every start,
#          default auth noauth2: token 'admin' is admin, no --fake-hosts); BERTH_BIN defaults to
#          target/release/berth relative to the current directory (run from the berth checkout or set BERTH_BIN).
#          Log: $S/log/berth.log (BERTH_LOG, default info,berth_http=debug: one line per request with its status).
#   real:  Placement 16.0.0 via real_placement_server.sh (uWSGI 4x4, own PostgreSQL on 28778; REAL_BACKEND=mysql:
#          the machine's MariaDB, database $MYSQL_DB, default placement_nova).
#          REAL_KEEPALIVE=1: the same uWSGI also listens with --http11-socket (HTTP/1.1 keep-alive) on 18779 and
#          nova's [placement]endpoint points there (the recipe's default, --http-socket + Connection: close on
#          18778, never reuses a connection); clouds.yaml and the checks keep using 18778. REAL_UWSGI_EXTRA adds
#          uWSGI arguments in that mode (e.g. "--socket-timeout 3600": idle keep-alive connections stay open).
# Knobs (environment): SCHED_DEBUG=1 (nova-scheduler with --debug: needed to count placement claim retries),
#   NOVA_DEBUG=1 (debug=true in every nova config: nova logs each placement request/response),
#   SCHED_WORKERS / COND_WORKERS (default 2 = nova's default on this 2-core machine), API_PROCS=2 API_THREADS=8.
# Needs: MariaDB (root via socket), RabbitMQ (guest on localhost), PostgreSQL 15 binaries (real placement's
#   own throwaway cluster via real_placement_server.sh), PyPI on first use for the venvs:
#   /tmp/pvenv (openstack-placement==16.0.0 pyuwsgi psycopg2-binary) and /tmp/nova-oracle/venv (nova==34.0.0 ...).
# Auth: Nova 34 has no noauth2 (no [api]auth_strategy option, keystone-only paste pipeline). api-paste.ini is
#   copied from the venv with keystonemiddleware's authtoken replaced by noauth_shim.py:
#   X-Auth-Token 'user:project' -> X-User-Id/X-Project-Id/X-Roles ('admin' -> roles admin,member,reader).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PTOOL=$HERE/real_placement_server.sh
PLACEMENT=${PLACEMENT:-berth}
BERTH_BIN=${BERTH_BIN:-target/release/berth}
R=/tmp/nova-oracle; V=$R/venv; N=$V/bin; S=$R/state
NOVA_PORT=18774 PLACEMENT_PORT=18778 GLANCE_PORT=19292 NEUTRON_PORT=19696
IMAGE_ID=a3c6f1a2-0000-4000-8000-000000000001

descendants() {  # pid -> all descendant pids (from /proc), deepest last
  local p c
  for p in "$@"; do
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do echo "$c"; descendants "$c"; done
  done
}

do_stop() {
  [ -f $S/pids ] || { echo "nothing recorded in $S/pids"; return 0; }
  # shellcheck disable=SC1091
  . $S/pids
  local v pid roots=() all=()
  for v in $(sed -n 's/^\([A-Z0-9_]*_PID\)=.*/\1/p' $S/pids); do
    pid=${!v}
    # real placement (uWSGI + its postgres) has its own stop; berth is a single process, stopped with the rest
    [ "$v" = PLACEMENT_PID ] && [ "$(cat $S/placement.kind 2>/dev/null)" = real ] && continue
    [ -n "$pid" ] && roots+=("$pid")
  done
  # shellcheck disable=SC2207
  all=("${roots[@]}" $(descendants "${roots[@]}"))
  kill -TERM "${roots[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    alive=0; for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.2
  done
  for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid" 2>/dev/null || true; }; done; true
  [ "$(cat $S/placement.kind 2>/dev/null)" = real ] && { "$PTOOL" stop $S/placement >/dev/null 2>&1 || true; }
  echo "stopped: ${all[*]} (placement: $(cat $S/placement.kind 2>/dev/null) ${PLACEMENT_PID:-})"
  rm -f $S/pids
}

# Nova's own processes (API, conductor, scheduler, computes) on the configs in $S; prints their PID assignments.
# Used by start and by switch (which restarts them on a new Placement endpoint).
start_services() {
  local n k i
  # shellcheck disable=SC1091
  . $S/topology
  export OS_NOVA_CONFIG_DIR=$S   # nova.wsgi reads nova.conf from here
  export PYTHONPATH=$HERE        # noauth_shim, fake_compute_multinode
  $N/uwsgi --http-socket 127.0.0.1:$NOVA_PORT --module nova.wsgi.osapi_compute:application --master \
    --processes "${API_PROCS:-2}" --threads "${API_THREADS:-8}" --lazy-apps --die-on-term --need-app \
    --add-header Connection:close >> $S/log/api.out 2>&1 & echo "API_PID=$!"
  $N/nova-conductor --config-file $S/nova.conf >> $S/log/conductor.out 2>&1 & echo "CONDUCTOR_PID=$!"
  dbg=(); [ "${SCHED_DEBUG:-0}" = 1 ] && dbg=(--debug)
  $N/nova-scheduler --config-file $S/nova.conf "${dbg[@]}" >> $S/log/scheduler.out 2>&1 & echo "SCHEDULER_PID=$!"
  for i in $(seq 1 "$n"); do
    if [ "$k" -gt 1 ]; then
      NOVA_FAKE_NODES=$k $N/python "$HERE/fake_compute_multinode.py" --config-file $S/compute$i.conf \
        >> $S/log/compute$i.out 2>&1 &
    else
      $N/nova-compute --config-file $S/compute$i.conf >> $S/log/compute$i.out 2>&1 &
    fi
    echo "COMPUTE${i}_PID=$!"
  done
}

# `switch URL`: what an operator does at the switch (PLACEMENT.md, adopting berth): Nova's [placement] endpoint
# becomes URL in every config, and the API, conductor, scheduler and computes restart on it. The old Placement
# (recorded PLACEMENT_PID) is left as it is: stop it first.
do_switch() {
  local url=$1 v pid roots=() all=() keep
  [ -f $S/pids ] || { echo "nothing recorded in $S/pids" >&2; return 1; }
  # shellcheck disable=SC1091
  . $S/pids
  for v in API_PID CONDUCTOR_PID SCHEDULER_PID $(sed -n 's/^\(COMPUTE[0-9]*_PID\)=.*/\1/p' $S/pids); do
    pid=${!v:-}; [ -n "$pid" ] && roots+=("$pid")
  done
  # shellcheck disable=SC2207
  all=("${roots[@]}" $(descendants "${roots[@]}"))
  kill -TERM "${roots[@]}" 2>/dev/null || true
  for _ in $(seq 75); do
    alive=0; for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.2
  done
  for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid" 2>/dev/null || true; }; done
  sed -i "s|^endpoint = .*|endpoint = $url|" $S/nova.conf $S/compute*.conf
  keep=$(grep -v -E '^(API|CONDUCTOR|SCHEDULER|COMPUTE[0-9]*)_PID=' $S/pids)
  { echo "$keep"; start_services; } > $S/pids.new
  mv $S/pids.new $S/pids
  for _ in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:$NOVA_PORT/v2.1/ && break; sleep 1; done
  echo "switched Nova's Placement endpoint to $url"
  cat $S/pids
}

case "${1:-}" in
switch) do_switch "${2:?usage: $0 switch URL}" ;;
start)
  n=${2:-2}; k=${3:-1}
  case "$PLACEMENT" in berth|real) ;; *) echo "PLACEMENT must be berth or real" >&2; exit 2 ;; esac
  if [ "$PLACEMENT" = berth ]; then
    [ -x "$BERTH_BIN" ] || { echo "no berth binary at $BERTH_BIN (set BERTH_BIN)" >&2; exit 2; }
    BERTH_BIN=$(cd "$(dirname "$BERTH_BIN")" && pwd)/$(basename "$BERTH_BIN")
  fi
  [ -f $S/pids ] && { echo "already started (see $S/pids); run stop first" >&2; exit 1; }
  if [ ! -x $N/nova-compute ]; then
    python3 -m venv $V
    $N/pip install -q nova==34.0.0 pymysql pyuwsgi python-openstackclient osc-placement >$R/pip.log 2>&1
  fi
  if [ "$PLACEMENT" = real ] && [ ! -x /tmp/pvenv/bin/uwsgi ]; then
    python3 -m venv /tmp/pvenv
    /tmp/pvenv/bin/pip install -q openstack-placement==16.0.0 pyuwsgi psycopg2-binary >$R/pip-placement.log 2>&1
  fi
  rm -rf $S; mkdir -p $S/log
  mariadb -u root -e "DROP DATABASE IF EXISTS nova_api; DROP DATABASE IF EXISTS nova_cell0; DROP DATABASE IF EXISTS nova;
    CREATE DATABASE nova_api; CREATE DATABASE nova_cell0; CREATE DATABASE nova;
    CREATE USER IF NOT EXISTS 'nova'@'127.0.0.1' IDENTIFIED BY 'nova';
    GRANT ALL ON nova_api.* TO 'nova'@'127.0.0.1'; GRANT ALL ON nova_cell0.* TO 'nova'@'127.0.0.1';
    GRANT ALL ON nova.* TO 'nova'@'127.0.0.1';"
  conf() {  # state host driver out
    sed -e "s|@STATE@|$1|g" -e "s|@HOST@|$2|" -e "s|@DRIVER@|$3|" \
        -e "s|@SCHED_WORKERS@|${SCHED_WORKERS:-2}|" -e "s|@COND_WORKERS@|${COND_WORKERS:-2}|" \
        "$HERE/nova.conf.tmpl" > "$4"
    if [ "${NOVA_DEBUG:-0}" = 1 ]; then sed -i 's/^debug = false/debug = true/' "$4"; fi
    if [ "$PLACEMENT" = real ] && [ "${REAL_KEEPALIVE:-0}" = 1 ]; then
      sed -i "s|^endpoint = http://127.0.0.1:$PLACEMENT_PORT\$|endpoint = http://127.0.0.1:$((PLACEMENT_PORT + 1))|" "$4"
    fi
    mkdir -p "$1/log" "$1/lock" "$1/instances"
  }
  conf $S nova-ctl fake.FakeDriver $S/nova.conf
  sed 's/ authtoken keystonecontext/ noauth_shim keystonecontext/' $V/etc/nova/api-paste.ini > $S/api-paste.ini
  printf '\n[filter:noauth_shim]\npaste.filter_factory = noauth_shim:factory\n' >> $S/api-paste.ini
  sed -e "s|@NOVA@|http://127.0.0.1:$NOVA_PORT/v2.1|g" -e "s|@IMAGE@|http://127.0.0.1:$GLANCE_PORT|g" \
      -e "s|@PLACEMENT@|http://127.0.0.1:$PLACEMENT_PORT|g" "$HERE/clouds.yaml.tmpl" > $S/clouds.yaml

  python3 "$HERE/fake_glance.py" $GLANCE_PORT > $S/log/glance.out 2>&1 & echo "GLANCE_PID=$!" > $S/pids
  python3 "$HERE/fake_neutron.py" $NEUTRON_PORT > $S/log/neutron.out 2>&1 & echo "NEUTRON_PID=$!" >> $S/pids
  echo "$PLACEMENT" > $S/placement.kind
  if [ "$PLACEMENT" = real ]; then
    # Placement 16.0.0 under uWSGI 4x4 on its own throwaway PostgreSQL. Connection: close because keystoneauth
    # reuses keep-alive connections that uWSGI's --http-socket drops (nova-compute then fails provider updates).
    extra="--add-header Connection:close"
    [ "${REAL_KEEPALIVE:-0}" = 1 ] && extra="--http11-socket 127.0.0.1:$((PLACEMENT_PORT + 1)) ${REAL_UWSGI_EXTRA:-}"
    UWSGI_EXTRA="$extra" MYSQL_DB=${MYSQL_DB:-placement_nova} \
      "$PTOOL" start "${REAL_BACKEND:-postgres}" $PLACEMENT_PORT $S/placement > $S/placement.env
    # shellcheck disable=SC1091
    . $S/placement.env; echo "PLACEMENT_PID=$PLACEMENT_PID" >> $S/pids
  else
    # berth as Placement: fresh SQLite data dir (the whole $S was just wiped), default auth noauth2, no fake hosts.
    mkdir -p $S/berth-data
    "$BERTH_BIN" serve --listen 127.0.0.1:$PLACEMENT_PORT --data-dir $S/berth-data \
      --log "${BERTH_LOG:-info,berth_http=debug}" --log-color never > $S/log/berth.log 2>&1 &
    echo "PLACEMENT_PID=$!" >> $S/pids
    for _ in $(seq 100); do curl -s -o /dev/null -m 2 http://127.0.0.1:$PLACEMENT_PORT/ && break; sleep 0.2; done
    curl -s -o /dev/null -m 2 http://127.0.0.1:$PLACEMENT_PORT/ || { echo "berth did not answer, see $S/log/berth.log" >&2; exit 1; }
  fi

  M="$N/nova-manage --config-file $S/nova.conf"
  $M api_db sync > $S/log/manage.out 2>&1
  $M cell_v2 map_cell0 --database_connection 'mysql+pymysql://nova:nova@127.0.0.1/nova_cell0?charset=utf8' >> $S/log/manage.out 2>&1
  $M cell_v2 create_cell --name cell1 >> $S/log/manage.out 2>&1
  $M db sync >> $S/log/manage.out 2>&1

  for i in $(seq 1 "$n"); do
    if [ "$k" -gt 1 ]; then
      conf $S/compute$i fake$i multinode_fake.MultiNodeFakeDriver $S/compute$i.conf
    else
      conf $S/compute$i fake$i fake.FakeDriver $S/compute$i.conf
    fi
  done
  echo "n=$n k=$k" > $S/topology
  start_services >> $S/pids

  want=$((n * k))
  for _ in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:$NOVA_PORT/v2.1/ && break; sleep 1; done
  count() {  # url jq-ish python expression over the JSON document
    curl -s -H 'X-Auth-Token: admin' -H 'OpenStack-API-Version: compute 2.53' -H 'OpenStack-API-Version: placement 1.30' "$1" |
      python3 -c "import sys,json; d=json.load(sys.stdin); print($2)" 2>/dev/null || echo 0
  }
  for _ in $(seq 120); do   # every nova-compute service registered and up (services need no host mapping)
    c=$(count "http://127.0.0.1:$NOVA_PORT/v2.1/os-services?binary=nova-compute" "sum(s['state']=='up' for s in d['services'])")
    [ "${c:-0}" -ge "$n" ] && break; sleep 1
  done
  sleep 2   # let the resource trackers write their ComputeNode rows, then map them (cells v2)
  $M cell_v2 discover_hosts >> $S/log/manage.out 2>&1
  for _ in $(seq 120); do   # hypervisors are listed only once their host is mapped to a cell
    c=$(count "http://127.0.0.1:$NOVA_PORT/v2.1/os-hypervisors?limit=100000" "len(d['hypervisors'])")
    [ "${c:-0}" -ge "$want" ] && break; sleep 1
    $M cell_v2 discover_hosts >> $S/log/manage.out 2>&1
  done
  for _ in $(seq 120); do   # boots get NoValidHost until every node has reported its inventory to placement
    c=$(count "http://127.0.0.1:$PLACEMENT_PORT/allocation_candidates?resources=VCPU:1,MEMORY_MB:64" "len(d['allocation_requests'])")
    [ "${c:-0}" -ge "$want" ] && break; sleep 1
  done
  [ "${c:-0}" -ge "$want" ] || echo "WARNING: only ${c:-0}/$want nodes have inventory in placement" >&2
  echo "NOVA_URL=http://127.0.0.1:$NOVA_PORT/v2.1"
  echo "PLACEMENT_URL=http://127.0.0.1:$PLACEMENT_PORT"
  echo "IMAGE_URL=http://127.0.0.1:$GLANCE_PORT"
  echo "NEUTRON_URL=http://127.0.0.1:$NEUTRON_PORT"
  echo "IMAGE_ID=$IMAGE_ID"
  echo "OS_CLIENT_CONFIG_FILE=$S/clouds.yaml"
  echo "OS_CLOUD=nova-reference"
  echo "NOVA_STATE=$S"
  echo "PLACEMENT_KIND=$PLACEMENT"
  cat $S/pids ;;
stop) do_stop ;;
pids) cat $S/pids ;;
*) sed -n 2,33p "$0"; exit 2 ;;
esac
