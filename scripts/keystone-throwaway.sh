#!/usr/bin/env bash
# A throwaway real Keystone for tests: PyPI `keystone` served by uwsgi from
# `keystone.wsgi.api:application`, SQLite backend, fernet tokens, on a free
# loopback port. Installs into a venv on first use (about 2 minutes).
#
#   eval "$(bash scripts/keystone-throwaway.sh start)"
#       -> KEYSTONE_URL, KEYSTONE_PID, KEYSTONE_DIR, KEYSTONE_ADMIN_PASSWORD
#   bash scripts/keystone-throwaway.sh stop "$KEYSTONE_PID" "$KEYSTONE_DIR"
#
# KEYSTONE_TOKEN_EXPIRATION sets the tokens' lifetime in seconds (default
# 3600). With KEYSTONE_WATCH_PID set, Keystone is also stopped (and its
# folder removed) once that process is gone: the integration tests start
# one this way when the test script gave them none.
#
# The bootstrap admin is `admin` / $KEYSTONE_ADMIN_PASSWORD in project
# `admin`, domain `Default`, with the roles admin, member, reader and
# service present. Tests create their own users and projects.
set -euo pipefail
VENV="${BERTH_KEYSTONE_VENV:-$HOME/.cache/berth/keystone-venv}"

install() {
  if [ -x "$VENV/bin/keystone-manage" ] && [ -x "$VENV/bin/uwsgi" ]; then return; fi
  echo "installing keystone and uwsgi into $VENV (PyPI)" >&2
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check keystone uwsgi >&2
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
  install
  local dir port pw
  dir=$(mktemp -d /tmp/berth-keystone.XXXXXX)
  port=$(free_port)
  pw="ks-admin-$RANDOM$RANDOM"
  mkdir -p "$dir/fernet-keys" "$dir/credential-keys"
  cat >"$dir/keystone.conf" <<EOF
[DEFAULT]
log_file = $dir/keystone.log
[database]
connection = sqlite:///$dir/keystone.db
[token]
provider = fernet
expiration = ${KEYSTONE_TOKEN_EXPIRATION:-3600}
[fernet_tokens]
key_repository = $dir/fernet-keys
[fernet_receipts]
key_repository = $dir/fernet-keys
[credential]
key_repository = $dir/credential-keys
EOF
  local km=("$VENV/bin/keystone-manage" --config-file "$dir/keystone.conf")
  "${km[@]}" db_sync >&2
  "${km[@]}" fernet_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)" >&2
  "${km[@]}" credential_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)" >&2
  "${km[@]}" bootstrap --bootstrap-password "$pw" \
    --bootstrap-admin-url "http://127.0.0.1:$port/v3" \
    --bootstrap-internal-url "http://127.0.0.1:$port/v3" \
    --bootstrap-public-url "http://127.0.0.1:$port/v3" \
    --bootstrap-region-id RegionOne >&2
  OS_KEYSTONE_CONFIG_FILES="$dir/keystone.conf" setsid "$VENV/bin/uwsgi" \
    --http-socket "127.0.0.1:$port" --module keystone.wsgi.api:application \
    --master --processes 2 --threads 2 --die-on-term --need-app \
    --http-keepalive --add-header "Connection: close" --post-buffering 65536 \
    --env "OS_KEYSTONE_CONFIG_FILES=$dir/keystone.conf" \
    >"$dir/uwsgi.log" 2>&1 </dev/null &
  local pid=$!
  for _ in $(seq 1 300); do
    if python3 - "$port" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v3", timeout=2).read()
PY
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "keystone did not start; see $dir/uwsgi.log" >&2
      tail -20 "$dir/uwsgi.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  # The `service` role is what keystonemiddleware asks of service tokens.
  python3 - "$port" "$pw" <<'PY' >&2
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}/v3"
body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
    "name": "admin", "domain": {"id": "default"}, "password": sys.argv[2]}}},
    "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}
req = urllib.request.Request(base + "/auth/tokens", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
token = urllib.request.urlopen(req).headers["X-Subject-Token"]
def call(method, path, body=None):
    req = urllib.request.Request(base + path, json.dumps(body).encode() if body else None,
                                 {"Content-Type": "application/json", "X-Auth-Token": token}, method=method)
    return json.load(urllib.request.urlopen(req))
names = {r["name"] for r in call("GET", "/roles")["roles"]}
for role in ("service", "member", "reader"):
    if role not in names:
        call("POST", "/roles", {"role": {"name": role}})
PY
  if [ -n "${KEYSTONE_WATCH_PID:-}" ]; then
    local self
    self=$(readlink -f "$0")
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; bash "$2" stop "$3" "$4"' \
      watch "$KEYSTONE_WATCH_PID" "$self" "$pid" "$dir" >/dev/null 2>&1 </dev/null &
  fi
  echo "KEYSTONE_URL=http://127.0.0.1:$port/v3"
  echo "KEYSTONE_PID=$pid"
  echo "KEYSTONE_DIR=$dir"
  echo "KEYSTONE_ADMIN_PASSWORD=$pw"
}

stop() {
  local pid="${1:-}" dir="${2:-}"
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  case "$dir" in /tmp/berth-keystone.*) rm -rf "$dir" ;; esac
}

case "${1:-}" in
  start) start ;;
  stop) shift; stop "$@" ;;
  install) install ;;
  *) echo "usage: $0 start | stop PID DIR | install" >&2; exit 2 ;;
esac
