#!/usr/bin/env bash
# Run upstream Tempest's compute (and optionally image) API tests against
# berth in Keystone mode. Run it from a berth checkout (see README.md).
#
#   bash run_tempest.sh            # all: start, configure, run, summarise, stop
#   bash run_tempest.sh start      # venvs, Keystone, berth, catalog, flavors,
#                                  # images, tempest.conf; leaves them running
#   bash run_tempest.sh run [REGEX]  # tempest run on what `start` left
#   bash run_tempest.sh extra [REGEX]  # supplementary run, see extra() below
#   bash run_tempest.sh summary    # counts of the last run, failing ids
#   bash run_tempest.sh stop       # stop berth and Keystone (by PID)
#
# Environment (defaults in brackets):
#   BERTH_BIN [target/release/berth]   berth binary (relative to the cwd)
#   KEYSTONE_SCRIPT [scripts/keystone-throwaway.sh]  berth's throwaway Keystone
#   BERTH_KEYSTONE_VENV [/tmp/ks-venv]  venv with keystone + uwsgi (made if absent)
#   TEMPEST_VENV [/tmp/tempest-venv]    venv for tempest + openstackclient
#   TEMPEST_VERSION [47.0.0]            the Tempest release (empty: latest)
#   TEMPEST_WORK [/tmp/tempest-work]    tempest workspace, logs, state
#   TEMPEST_REGEX ['^tempest\.api\.compute']  what `all` runs
#   TEMPEST_CONCURRENCY [2]   TEMPEST_TIMEOUT [2100] seconds for `tempest run`
#   FAKE_HOSTS [4]   BUILD_TIMEOUT [60]   BERTH_PORT [random 30000-39999]
#   MAX_MICROVERSION [2.104]
#   KEYSTONE_DB [postgres]  postgres: a throwaway database on
#       PG_URL [postgresql://postgres@127.0.0.1:5432] (psql and the psycopg2
#       driver, pip-installed into $TEMPEST_WORK/ks-pg); sqlite: berth's
#       scripts/keystone-throwaway.sh as it is (SQLite: under tempest's
#       concurrent user/project churn it answers some calls with
#       "database is locked" 500s, which fail tests for Keystone's sake)
set -euo pipefail

BERTH_BIN=${BERTH_BIN:-target/release/berth}
TEMPEST_VERSION=${TEMPEST_VERSION-47.0.0}
KEYSTONE_SCRIPT=${KEYSTONE_SCRIPT:-scripts/keystone-throwaway.sh}
export BERTH_KEYSTONE_VENV=${BERTH_KEYSTONE_VENV:-/tmp/ks-venv}
TEMPEST_VENV=${TEMPEST_VENV:-/tmp/tempest-venv}
WORK=${TEMPEST_WORK:-/tmp/tempest-work}
REGEX=${TEMPEST_REGEX:-'^tempest\.api\.compute'}
CONCURRENCY=${TEMPEST_CONCURRENCY:-2}
RUN_TIMEOUT=${TEMPEST_TIMEOUT:-2100}
FAKE_HOSTS=${FAKE_HOSTS:-4}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-60}
MAX_MICROVERSION=${MAX_MICROVERSION:-2.104}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KEYSTONE_SCRIPT=$(readlink -f "$KEYSTONE_SCRIPT")
STATE=$WORK/state.env
KEYSTONE_DB=${KEYSTONE_DB:-postgres}
PG_URL=${PG_URL:-postgresql://postgres@127.0.0.1:5432}

log() { echo "[run_tempest] $*" >&2; }

venvs() {
  if [ ! -x "$TEMPEST_VENV/bin/tempest" ]; then
    log "installing tempest into $TEMPEST_VENV"
    python3 -m venv "$TEMPEST_VENV"
    "$TEMPEST_VENV/bin/pip" install -q --disable-pip-version-check \
      "tempest${TEMPEST_VERSION:+==$TEMPEST_VERSION}" python-openstackclient
  fi
  bash "$KEYSTONE_SCRIPT" install
}

free_port() {
  python3 - <<'PY'
import random, socket
for _ in range(200):
    p = random.randint(30000, 39999)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); s.close(); print(p); break
    except OSError:
        pass
PY
}

# Keystone as scripts/keystone-throwaway.sh starts it (uwsgi, fernet), but on
# a PostgreSQL database of its own and with cheap password hashing.
keystone_pg_start() {
  local py=$BERTH_KEYSTONE_VENV/bin/python pgpath=$WORK/ks-pg
  if ! PYTHONPATH=$pgpath "$py" -c 'import psycopg2' 2>/dev/null; then
    "$BERTH_KEYSTONE_VENV/bin/pip" install -q --disable-pip-version-check \
      --target "$pgpath" psycopg2-binary >&2
  fi
  KEYSTONE_DIR=$(mktemp -d /tmp/berth-keystone.XXXXXX)
  KEYSTONE_PGDB=tempest_ks_$RANDOM$RANDOM
  psql "$PG_URL/postgres" -qc "CREATE DATABASE $KEYSTONE_PGDB" >&2
  local port; port=$(free_port)
  KEYSTONE_URL=http://127.0.0.1:$port/v3
  KEYSTONE_ADMIN_PASSWORD=ks-admin-$RANDOM$RANDOM
  local d=$KEYSTONE_DIR
  mkdir -p "$d/fernet-keys" "$d/credential-keys"
  cat >"$d/keystone.conf" <<KSEOF
[DEFAULT]
log_file = $d/keystone.log
[database]
connection = postgresql+psycopg2://${PG_URL#postgresql://}/$KEYSTONE_PGDB
[identity]
# bcrypt's minimum: tempest creates and authenticates users all the time
password_hash_rounds = 4
[token]
provider = fernet
expiration = 14400
[fernet_tokens]
key_repository = $d/fernet-keys
[fernet_receipts]
key_repository = $d/fernet-keys
[credential]
key_repository = $d/credential-keys
KSEOF
  local km=(env PYTHONPATH="$pgpath" "$BERTH_KEYSTONE_VENV/bin/keystone-manage" --config-file "$d/keystone.conf")
  "${km[@]}" db_sync >&2 2>"$d/manage.log"
  "${km[@]}" fernet_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)" 2>>"$d/manage.log"
  "${km[@]}" credential_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)" 2>>"$d/manage.log"
  "${km[@]}" bootstrap --bootstrap-password "$KEYSTONE_ADMIN_PASSWORD" \
    --bootstrap-admin-url "$KEYSTONE_URL" --bootstrap-internal-url "$KEYSTONE_URL" \
    --bootstrap-public-url "$KEYSTONE_URL" --bootstrap-region-id RegionOne 2>>"$d/manage.log"
  OS_KEYSTONE_CONFIG_FILES="$d/keystone.conf" PYTHONPATH="$pgpath" setsid "$BERTH_KEYSTONE_VENV/bin/uwsgi" \
    --http-socket "127.0.0.1:$port" --module keystone.wsgi.api:application \
    --master --processes 2 --threads 2 --die-on-term --need-app \
    --http-keepalive --add-header "Connection: close" --post-buffering 65536 \
    --pythonpath "$pgpath" --env "OS_KEYSTONE_CONFIG_FILES=$d/keystone.conf" \
    >"$d/uwsgi.log" 2>&1 </dev/null &
  KEYSTONE_PID=$!
  for _ in $(seq 1 300); do
    curl -fsS "$KEYSTONE_URL" >/dev/null 2>&1 && break
    kill -0 "$KEYSTONE_PID" 2>/dev/null || { log "keystone died"; tail -20 "$d/uwsgi.log" >&2; exit 1; }
    sleep 0.2
  done
  local os=("$TEMPEST_VENV/bin/openstack" --os-auth-url "$KEYSTONE_URL" --os-identity-api-version 3
    --os-username admin --os-password "$KEYSTONE_ADMIN_PASSWORD" --os-project-name admin
    --os-user-domain-name Default --os-project-domain-name Default)
  for r in service member reader; do "${os[@]}" role create --or-show "$r" -f value -c id >/dev/null; done
}

start() {
  venvs
  [ -x "$BERTH_BIN" ] || { log "no berth binary at $BERTH_BIN (cargo build --release)"; exit 1; }
  BERTH_BIN=$(readlink -f "$BERTH_BIN")
  if [ -f "$STATE" ]; then log "$STATE exists: run '$0 stop' first"; exit 1; fi
  mkdir -p "$WORK"
  # 1. Keystone (tokens live 4 h: a run must not outlive its admin token)
  if [ "$KEYSTONE_DB" = postgres ]; then
    keystone_pg_start
  else
    eval "$(KEYSTONE_TOKEN_EXPIRATION=14400 bash "$KEYSTONE_SCRIPT" start)"
  fi
  {
    echo "KEYSTONE_URL=$KEYSTONE_URL"; echo "KEYSTONE_PID=$KEYSTONE_PID"
    echo "KEYSTONE_DIR=$KEYSTONE_DIR"; echo "KEYSTONE_ADMIN_PASSWORD=$KEYSTONE_ADMIN_PASSWORD"
    echo "KEYSTONE_PGDB=${KEYSTONE_PGDB:-}"
  } >"$STATE"
  log "keystone $KEYSTONE_URL (pid $KEYSTONE_PID)"
  local os="$TEMPEST_VENV/bin/openstack"
  export OS_AUTH_URL=$KEYSTONE_URL OS_IDENTITY_API_VERSION=3 OS_USERNAME=admin \
    OS_PASSWORD=$KEYSTONE_ADMIN_PASSWORD OS_PROJECT_NAME=admin \
    OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default OS_REGION_NAME=RegionOne \
    OS_INTERFACE=public
  # 2. berth's service user (role service in project service)
  local bpw="berth-$RANDOM$RANDOM"
  $os project create --domain Default service -f value -c id >/dev/null
  $os user create --domain Default --password "$bpw" berth -f value -c id >/dev/null
  $os role add --project service --user berth service
  # 3. berth, Keystone mode, fake hosts, fresh data dir
  local port=${BERTH_PORT:-$(free_port)}
  local B="http://127.0.0.1:$port"
  rm -rf "$WORK/berth-data"; mkdir -p "$WORK/berth-data"
  setsid "$BERTH_BIN" serve --listen "127.0.0.1:$port" --data-dir "$WORK/berth-data" \
    --auth keystone --keystone-url "$KEYSTONE_URL" --keystone-user berth \
    --keystone-password "$bpw" --keystone-project service \
    --fake-hosts "$FAKE_HOSTS" --log-color never \
    >"$WORK/berth.log" 2>&1 </dev/null &
  local bpid=$!
  { echo "BERTH_PID=$bpid"; echo "BERTH_URL=$B"; } >>"$STATE"
  for _ in $(seq 1 150); do
    curl -fsS "$B/compute/" >/dev/null 2>&1 && break
    kill -0 "$bpid" 2>/dev/null || { log "berth died"; tail -20 "$WORK/berth.log" >&2; exit 1; }
    sleep 0.2
  done
  log "berth $B (pid $bpid)"
  # 4. catalog, as docs/KEYSTONE.md
  $os service create --name placement placement -f value -c id >/dev/null
  $os service create --name nova compute -f value -c id >/dev/null
  $os service create --name glance image -f value -c id >/dev/null
  $os service create --name blazar reservation -f value -c id >/dev/null
  for i in public internal admin; do
    $os endpoint create --region RegionOne placement   $i "$B" -f value -c id >/dev/null
    $os endpoint create --region RegionOne compute     $i "$B/compute/v2.1" -f value -c id >/dev/null
    $os endpoint create --region RegionOne image       $i "$B/image" -f value -c id >/dev/null
    $os endpoint create --region RegionOne reservation $i "$B/reservation/v1" -f value -c id >/dev/null
  done
  # the fake hosts register in the first seconds
  for _ in $(seq 1 60); do
    n=$($os hypervisor list -f value -c ID 2>/dev/null | wc -l || true)
    [ "$n" -ge "$FAKE_HOSTS" ] && break; sleep 1
  done
  log "hypervisors: $n"
  # 5. flavors and images for tempest
  local f1 f2 i1 i2
  f1=$($os flavor create --vcpus 1 --ram 128 --disk 1 --id 42 m1.tempest -f value -c id)
  f2=$($os flavor create --vcpus 1 --ram 192 --disk 1 --id 84 m1.tempest-alt -f value -c id)
  head -c 1048576 /dev/urandom >"$WORK/tempest-image.raw"
  i1=$($os image create --disk-format raw --container-format bare --public \
        --file "$WORK/tempest-image.raw" tempest-image -f value -c id)
  i2=$($os image create --disk-format raw --container-format bare --public \
        --file "$WORK/tempest-image.raw" tempest-image-alt -f value -c id)
  log "flavors $f1 $f2, images $i1 $i2"
  $os image list >&2
  # 6. tempest workspace and tempest.conf
  local ver; ver=$(curl -fsS "$B/compute/v2.1" -H "X-Auth-Token: $($os token issue -f value -c id)" |
    python3 -c 'import json,sys; v=json.load(sys.stdin)["version"]; print(v["min_version"], v["version"])')
  log "compute advertises min/max microversion: $ver"
  local minv=${ver%% *}
  rm -rf "$WORK/ws"
  "$TEMPEST_VENV/bin/tempest" init "$WORK/ws" >/dev/null 2>&1 || true
  mkdir -p "$WORK/lock"
  sed -e "s|@WORK@|$WORK|g" -e "s|@KEYSTONE_URL@|$KEYSTONE_URL|g" \
      -e "s|@ADMIN_PASSWORD@|$KEYSTONE_ADMIN_PASSWORD|g" \
      -e "s|@IMAGE_REF@|$i1|g" -e "s|@IMAGE_REF_ALT@|$i2|g" \
      -e "s|@FLAVOR_REF@|$f1|g" -e "s|@FLAVOR_REF_ALT@|$f2|g" \
      -e "s|@MIN_MICROVERSION@|$minv|g" -e "s|@MAX_MICROVERSION@|$MAX_MICROVERSION|g" \
      -e "s|@MIN_COMPUTE_NODES@|$FAKE_HOSTS|g" -e "s|@BUILD_TIMEOUT@|$BUILD_TIMEOUT|g" \
      "$HERE/tempest.conf.in" >"$WORK/ws/etc/tempest.conf"
  log "tempest.conf: $WORK/ws/etc/tempest.conf"
}

run() (
  local regex=${1:-$REGEX}
  cd "$WORK/ws"
  log "tempest run --regex '$regex' --concurrency $CONCURRENCY (timeout ${RUN_TIMEOUT}s)"
  timeout --signal=INT --kill-after=60 "$RUN_TIMEOUT" \
    "$TEMPEST_VENV/bin/tempest" run --regex "$regex" --concurrency "$CONCURRENCY" \
    >"$WORK/last-run.txt" 2>&1 || log "tempest run exit status $?"
  tail -15 "$WORK/last-run.txt" >&2
)

# Supplementary run (not upstream's configuration; report it apart): the
# compute classes that skip for want of Neutron only because they ask for a
# default network run without one (berth_nonet.py, through a .pth in the
# venv, removed afterwards); the few tests of theirs that call Neutron's own
# API skip there with the reason berth_nonet.py gives.
extra() (
  local regex=${1:-$REGEX}
  local site; site=$("$TEMPEST_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$HERE/berth_nonet.py" "$site/berth_nonet.py"
  echo "import berth_nonet" >"$site/zz_berth_nonet.pth"
  trap 'rm -f "$site/berth_nonet.py" "$site/zz_berth_nonet.pth"' EXIT
  cd "$WORK/ws"
  log "EXTRA tempest run --regex '$regex' (no default network)"
  BERTH_TEMPEST_NO_DEFAULT_NETWORK=1 timeout --signal=INT --kill-after=60 "$RUN_TIMEOUT" \
    "$TEMPEST_VENV/bin/tempest" run --regex "$regex" \
    --concurrency "$CONCURRENCY" >"$WORK/last-run.txt" 2>&1 || log "tempest run exit status $?"
  tail -15 "$WORK/last-run.txt" >&2
)

summary() (
  cd "$WORK/ws"
  "$TEMPEST_VENV/bin/stestr" last --subunit >"$WORK/last.subunit" 2>/dev/null || true
  "$TEMPEST_VENV/bin/subunit2csv" <"$WORK/last.subunit" >"$WORK/last.csv" 2>/dev/null || true
  python3 "$HERE/summarize.py" "$WORK/last.csv" "$WORK/failing.txt"
  "$TEMPEST_VENV/bin/python" "$HERE/skips.py" "$WORK/last.subunit" >"$WORK/skips.txt" 2>/dev/null || true
  echo "skipped, by reason ($WORK/skips.txt):"
  cat "$WORK/skips.txt"
)

stop() {
  [ -f "$STATE" ] || { log "nothing to stop ($STATE missing)"; return 0; }
  # shellcheck disable=SC1090
  . "$STATE"
  if [ -n "${BERTH_URL:-}" ]; then
    curl -fsS "$BERTH_URL/metrics" >"$WORK/berth-metrics.txt" 2>/dev/null || true
  fi
  if [ -n "${BERTH_PID:-}" ]; then
    kill -TERM "$BERTH_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$BERTH_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$BERTH_PID" 2>/dev/null || true
  fi
  if [ -n "${KEYSTONE_DIR:-}" ] && [ -d "$KEYSTONE_DIR" ]; then
    cp "$KEYSTONE_DIR/keystone.log" "$WORK/keystone.log" 2>/dev/null || true
    cp "$KEYSTONE_DIR/uwsgi.log" "$WORK/keystone-uwsgi.log" 2>/dev/null || true
  fi
  bash "$KEYSTONE_SCRIPT" stop "${KEYSTONE_PID:-}" "${KEYSTONE_DIR:-}"
  if [ -n "${KEYSTONE_PGDB:-}" ]; then
    psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS $KEYSTONE_PGDB" >&2 || true
  fi
  rm -f "$STATE"
  log "stopped berth ${BERTH_PID:-} and keystone ${KEYSTONE_PID:-}"
}

case "${1:-all}" in
  start) start ;;
  run) shift; run "${1:-}" ;;
  extra) shift; extra "${1:-}" ;;
  summary) summary ;;
  stop) stop ;;
  all) trap stop EXIT; start; run "$REGEX"; summary
       log "berth log lines with a panic or a 5xx: $(grep -ciE 'panick|status=5[0-9][0-9]' "$WORK/berth.log" || true)" ;;
  *) echo "usage: $0 [all|start|run [REGEX]|summary|stop]" >&2; exit 2 ;;
esac
