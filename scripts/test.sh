#!/usr/bin/env bash
# Runs berth's whole test suite twice: once on the embedded SQLite backend,
# once on PostgreSQL (store conformance suite, HTTP integration tests,
# multi-process tests). PostgreSQL comes from $TEST_DATABASE_URL or
# $DATABASE_URL when set; otherwise a throwaway server is installed (Debian
# package, when missing) and started by scripts/pg-throwaway.sh, and stopped
# by PID at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) first" >&2
  exit 1
fi

PG_PID=""
PG_DIR=""
KEYSTONE_PID=""
KEYSTONE_DIR=""
NATS_PID=""
NATS_DIR=""
LIBVIRT_PIDS=""
SWIFT_PID=""
SWIFT_DIR=""
cleanup() {
  if [ -n "$SWIFT_PID" ]; then bash scripts/swift-throwaway.sh stop "$SWIFT_PID" "$SWIFT_DIR" || true; fi
  if [ -n "$LIBVIRT_PIDS" ]; then bash scripts/libvirt-throwaway.sh stop "$LIBVIRT_PIDS" || true; fi
  if [ -n "$NATS_PID" ]; then bash scripts/nats-throwaway.sh stop "$NATS_PID" "$NATS_DIR" || true; fi
  if [ -n "$PG_PID" ]; then bash scripts/pg-throwaway.sh stop "$PG_PID" "$PG_DIR" || true; fi
  if [ -n "$KEYSTONE_PID" ]; then bash scripts/keystone-throwaway.sh stop "$KEYSTONE_PID" "$KEYSTONE_DIR" || true; fi
}
LOG=$(mktemp /tmp/berth-test.XXXXXX)
trap 'cleanup; rm -f "$LOG"' EXIT

# A real Keystone for the keystone-auth tests: $BERTH_TEST_KEYSTONE_URL (with
# $BERTH_TEST_KEYSTONE_ADMIN_PASSWORD) when given, else a throwaway one
# (PyPI keystone + uwsgi, installed on first use), stopped by PID at exit.
if [ -z "${BERTH_TEST_KEYSTONE_URL:-}" ]; then
  echo "== starting a throwaway Keystone =="
  eval "$(bash scripts/keystone-throwaway.sh start)"
  export BERTH_TEST_KEYSTONE_URL="$KEYSTONE_URL" BERTH_TEST_KEYSTONE_ADMIN_PASSWORD="$KEYSTONE_ADMIN_PASSWORD"
fi

# NATS with JetStream for the pull-mode tests: $BERTH_TEST_NATS_URL, else
# nats://127.0.0.1:4222; when nothing answers there, a throwaway
# `nats-server -js` on a free port, stopped by PID at exit.
# $BERTH_TEST_NATS_SERVER: the binary the NATS restart test starts and
# stops itself (found or installed by scripts/nats-throwaway.sh bin).
NATS_TRY="${BERTH_TEST_NATS_URL:-nats://127.0.0.1:4222}"
NATS_HOSTPORT="${NATS_TRY#nats://}"
if ! (echo > "/dev/tcp/${NATS_HOSTPORT%:*}/${NATS_HOSTPORT##*:}") 2>/dev/null; then
  echo "== starting a throwaway NATS (JetStream) =="
  eval "$(bash scripts/nats-throwaway.sh start)"
  NATS_TRY="$NATS_URL"
fi
export BERTH_TEST_NATS_URL="$NATS_TRY"
# The NATS restart test runs a server of its own: it needs the binary.
if [ -z "${BERTH_TEST_NATS_SERVER:-}" ]; then
  BERTH_TEST_NATS_SERVER=$(bash scripts/nats-throwaway.sh bin)
  export BERTH_TEST_NATS_SERVER
fi

# libvirt and QEMU for the real-guest tests (`--driver libvirt`): the
# packages installed when missing (as root), virtlogd and libvirtd started
# when nothing answers at qemu:///system, stopped by PID at exit. Without
# them those tests print why they skipped.
echo "== libvirt and QEMU for the real-guest tests =="
eval "$(bash scripts/libvirt-throwaway.sh start)" || echo "libvirt not available: the real-guest tests will skip"

# An object store for the image data tests (`--image-store s3://...`):
# $BERTH_TEST_S3_URL (with _ACCESS_KEY, _SECRET_KEY, _BUCKET) when given,
# else a throwaway OpenStack Swift speaking S3 through its s3api middleware
# (Debian packages, installed on first use), stopped by PID at exit.
if [ -z "${BERTH_TEST_S3_URL:-}" ]; then
  echo "== starting a throwaway OpenStack Swift (S3 through s3api) =="
  eval "$(bash scripts/swift-throwaway.sh start)"
  export BERTH_TEST_S3_URL="$SWIFT_S3_URL" BERTH_TEST_S3_ACCESS_KEY="$SWIFT_ACCESS_KEY" \
    BERTH_TEST_S3_SECRET_KEY="$SWIFT_SECRET_KEY" BERTH_TEST_S3_BUCKET="$SWIFT_BUCKET" \
    BERTH_TEST_SWIFT_AUTH_URL="$SWIFT_AUTH_URL"
fi

echo "== berth tests on SQLite =="
env -u TEST_DATABASE_URL cargo test --workspace --locked "$@" 2>&1 | tee -a "$LOG"

# The real OpenStack client (python-openstackclient from PyPI) against the
# binary the tests just built: placement, the compute API, then the
# reservation API (python-blazarclient and its openstack plugin).
echo "== openstack CLI smoke (placement, compute, reservation; then with Keystone) =="
BERTH_BIN=target/debug/berth bash scripts/openstack-cli-smoke.sh 2>&1 | tee -a "$LOG"
BERTH_BIN=target/debug/berth bash scripts/openstack-compute-smoke.sh 2>&1 | tee -a "$LOG"
BERTH_BIN=target/debug/berth bash scripts/blazar-cli-smoke.sh 2>&1 | grep -v -e '^Matches: ' -e "^Could not load 'reservation_host_unset'" | tee -a "$LOG"
BERTH_BIN=target/debug/berth bash scripts/openstack-keystone-smoke.sh 2>&1 | grep -v "^Could not load 'reservation_host_unset'" | tee -a "$LOG"
# The operator dashboard in a real headless Chromium (installed on first use).
echo "== dashboard browser test (headless Chromium) =="
BERTH_BIN=target/debug/berth bash scripts/dashboard-browser-test.sh 2>&1 | tee -a "$LOG"
BERTH_BIN=target/debug/berth bash scripts/readme-check.sh 2>&1 | tee -a "$LOG"

URL="${TEST_DATABASE_URL:-${DATABASE_URL:-}}"
if [ -z "$URL" ]; then
  echo "== starting a throwaway PostgreSQL =="
  eval "$(bash scripts/pg-throwaway.sh start)"
  URL="$DATABASE_URL"
fi
# Upstream Tempest 47 against the debug binary the SQLite pass built:
# the compute and image API tests in the upstream configuration
# (scripts/conformance.sh upstream, ~8 min here); with
# BERTH_TEST_TEMPEST=all also the supplementary compute run (conformance.sh
# tempest, ~15 min more), with BERTH_TEST_TEMPEST=off neither. Any failed
# test fails the script. Tempest's venv and Keystone's are installed on
# first use; Keystone gets a throwaway database on this PostgreSQL server;
# berth and Keystone are stopped by PID.
TEMPEST_MODE=upstream
case "${BERTH_TEST_TEMPEST:-upstream}" in
  all) TEMPEST_MODE=tempest ;;
  off) TEMPEST_MODE="" ;;
esac
TEMPEST_STATUS=0
if [ -n "$TEMPEST_MODE" ]; then
  echo "== upstream Tempest 47: compute + image API ($TEMPEST_MODE) =="
  PG_SERVER="${URL#*://}"; PG_SERVER="postgresql://${PG_SERVER%%[/?]*}"
  PG_URL="$PG_SERVER" BERTH_BIN=target/debug/berth TEMPEST_WORK="${TEMPEST_WORK:-/tmp/berth-test-tempest}" \
    TEMPEST_VENV="${TEMPEST_VENV:-$HOME/.cache/berth/tempest-venv}" \
    BERTH_KEYSTONE_VENV="${BERTH_KEYSTONE_VENV:-$HOME/.cache/berth/keystone-venv}" \
    bash scripts/conformance.sh "$TEMPEST_MODE" 2>&1 | tee -a "$LOG" || TEMPEST_STATUS=$?
fi

echo "== berth tests on PostgreSQL =="
TEST_DATABASE_URL="$URL" cargo test --workspace --locked "$@" 2>&1 | tee -a "$LOG"

# PostgreSQL stopped and restarted under load: only against a server this
# script started itself (nothing else may be using it at that moment).
if [ -n "$PG_PID" ]; then
  echo "== PostgreSQL restart under load =="
  BERTH_TEST_PG_RESTART="$PG_DIR:$PG_PORT" TEST_DATABASE_URL="$URL" \
    cargo test -p berth --test integration --locked pg_restart -- --nocapture 2>&1 | tee -a "$LOG"
fi

# One closing line for both passes (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "total: %d passed, %d failed\n", p, f }' "$LOG"
if [ "$TEMPEST_STATUS" -ne 0 ]; then
  echo "upstream Tempest: failed tests (see above)" >&2
  exit 1
fi
