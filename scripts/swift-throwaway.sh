#!/usr/bin/env bash
# Throwaway OpenStack Swift (all in one) for tests/CI: the object store
# berth's image data can live in (`--image-store s3://BUCKET`), spoken to
# over S3 through Swift's own `s3api` middleware.
#   eval "$(bash swift-throwaway.sh start)"  -> exports SWIFT_PID, SWIFT_DIR,
#       SWIFT_S3_URL, SWIFT_ACCESS_KEY, SWIFT_SECRET_KEY, SWIFT_BUCKET, SWIFT_AUTH_URL
#   bash swift-throwaway.sh stop "$SWIFT_PID" "$SWIFT_DIR"
# Uses Debian 12's packages (swift 2.30: `swift-proxy`, `swift-account`,
# `swift-container`, `swift-object`, and `memcached` for tempauth's
# tokens), installed when missing (as root; the
# packages' services are not started: nothing here touches /etc/swift).
# One device directory with `mount_check = false`, rings of one replica,
# `tempauth` with one account, and `s3api` in the proxy's pipeline, so the
# same server answers Swift's API and S3 (SigV4). Four servers run in the
# foreground (`workers = 0`) on free loopback ports; SWIFT_PID is the
# proxy's, and stop also ends the others (listed in $SWIFT_DIR/pids). A
# bucket is created ready.
set -euo pipefail

cmd=${1:-start}

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [ "${st:0:1}" != Z ]; }
stop_pids() {
  local p left
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    left=""
    for p in "$@"; do alive "$p" && left=1; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  for p in "$@"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  return 0
}
stop_all() { stop_pids $(cat "$DIR/pids"); }

case "$cmd" in
start)
  if ! command -v swift-proxy-server >/dev/null 2>&1 || ! command -v swift-object-server >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        swift swift-proxy swift-account swift-container swift-object memcached; } >&2
  fi
  command -v memcached >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq memcached; } >&2
  DIR=$(mktemp -d /tmp/swifttest.XXXXXX)
  mkdir -p "$DIR/etc" "$DIR/srv/d1"
  MEMCACHE=$(free_port); PROXY=$(free_port); ACCOUNT=$(free_port); CONTAINER=$(free_port); OBJECT=$(free_port)
  ACCESS=test:tester
  SECRET=$(python3 -c 'import secrets;print(secrets.token_hex(12))')
  HASH=$(python3 -c 'import secrets;print(secrets.token_hex(8))')
  cat >"$DIR/etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_suffix = $HASH
swift_hash_path_prefix = $HASH
[storage-policy:0]
name = Policy-0
default = yes
EOF
  common="[DEFAULT]
swift_dir = $DIR/etc
devices = $DIR/srv
mount_check = false
bind_ip = 127.0.0.1
workers = 0
log_name = swift
log_facility = LOG_LOCAL0
log_address = /nonexistent
user = root
"
  for kind in account container object; do
    case $kind in account) port=$ACCOUNT;; container) port=$CONTAINER;; object) port=$OBJECT;; esac
    printf '%sbind_port = %s\n\n[pipeline:main]\npipeline = %s-server\n\n[app:%s-server]\nuse = egg:swift#%s\n' \
      "$common" "$port" "$kind" "$kind" "$kind" >"$DIR/etc/$kind-server.conf"
    [ $kind = container ] && printf '\n[container-sync]\n' >>"$DIR/etc/$kind-server.conf"
    ( cd "$DIR/etc"
      swift-ring-builder $kind.builder create 6 1 1
      swift-ring-builder $kind.builder add r1z1-127.0.0.1:$port/d1 1
      swift-ring-builder $kind.builder rebalance ) >"$DIR/ring-$kind.log" 2>&1 || true
    [ -s "$DIR/etc/$kind.ring.gz" ] || { cat "$DIR/ring-$kind.log" >&2; exit 1; }
  done
  cat >"$DIR/etc/proxy-server.conf" <<EOF
$common
bind_port = $PROXY

[pipeline:main]
pipeline = catch_errors proxy-logging cache s3api tempauth slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:proxy-logging]
use = egg:swift#proxy_logging


[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$MEMCACHE

[filter:s3api]
use = egg:swift#s3api
location = us-east-1

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = $SECRET .admin
storage_url_scheme = default

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo
EOF
  # Each server detaches into a session of its own (swift's
  # drop_privileges calls setsid): their PIDs go to $DIR/pids, for stop.
  : >"$DIR/pids"
  # tempauth keeps its tokens in memcached (it refuses to work without).
  memcached -l 127.0.0.1 -p "$MEMCACHE" -U 0 -m 16 -u root </dev/null >"$DIR/memcached.log" 2>&1 &
  echo $! >>"$DIR/pids"
  for kind in account container object proxy; do
    swift-$kind-server "$DIR/etc/$kind-server.conf" --verbose </dev/null >"$DIR/$kind.log" 2>&1 &
    echo $! >>"$DIR/pids"
  done
  PID=$!   # the proxy
  # Ready when S3 creates the bucket (an S3 `PUT /bucket`, signed with
  # AWS signature v2, which s3api takes as well as v4).
  BUCKET=berth-images
  ok=""
  for _ in $(seq 1 150); do
    if python3 - "$PROXY" "$ACCESS" "$SECRET" "$BUCKET" <<'PY' 2>/dev/null
import base64, hashlib, hmac, sys, urllib.request
from email.utils import formatdate
port, access, secret, bucket = sys.argv[1:5]
date = formatdate(usegmt=True)
sig = base64.b64encode(hmac.new(secret.encode(), f"PUT\n\n\n{date}\n/{bucket}".encode(), hashlib.sha1).digest()).decode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT",
                             headers={"Date": date, "Authorization": f"AWS {access}:{sig}"})
urllib.request.urlopen(req, timeout=5)
PY
    then ok=1; break; fi
    if ! kill -0 "$PID" 2>/dev/null; then break; fi
    if grep -q ' 500 ' "$DIR/proxy.log"; then break; fi
    sleep 0.2
  done
  [ -n "$ok" ] || { echo "swift did not come up" >&2; tail -n 20 "$DIR"/*.log >&2; stop_all; exit 1; }
  echo "export SWIFT_PID=$PID SWIFT_DIR=$DIR SWIFT_S3_URL=http://127.0.0.1:$PROXY SWIFT_AUTH_URL=http://127.0.0.1:$PROXY/auth/v1.0 SWIFT_ACCESS_KEY=$ACCESS SWIFT_SECRET_KEY=$SECRET SWIFT_BUCKET=$BUCKET"
  ;;
stop)
  PID=${2:?pid}; DIR=${3:-}
  PIDS=$PID
  if [ -n "$DIR" ] && [ -f "$DIR/pids" ]; then PIDS="$PIDS $(cat "$DIR/pids")"; fi
  stop_pids $PIDS
  if [ -n "$DIR" ]; then case "$DIR" in /tmp/swifttest.*) rm -rf "$DIR";; esac; fi
  ;;
esac
