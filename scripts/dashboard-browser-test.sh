#!/usr/bin/env bash
# The dashboard's browser test (scripts/dashboard-browser-test.py) in a real
# headless Chromium: installs Debian's chromium (as root, when missing) and
# Playwright from PyPI (in a venv made on first use, $DASHBOARD_VENV,
# default /tmp/berth-dashboard-venv), then runs the test against $BERTH_BIN
# (default: builds target/release/berth). Skips with a message only when
# Chromium cannot be installed (not root, no apt-get).
#   scripts/dashboard-browser-test.sh [--screenshots DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BERTH=${BERTH_BIN:-target/release/berth}
[ -n "${BERTH_BIN:-}" ] || cargo build --release --locked -q
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (Debian) for the dashboard browser test"
    apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null \
      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null; }
  else
    echo "SKIP: dashboard browser test: no $CHROMIUM and cannot install it (needs root and apt-get)"
    exit 0
  fi
fi
VENV=${DASHBOARD_VENV:-/tmp/berth-dashboard-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import playwright' 2>/dev/null; then
  if ! python3 -m venv "$VENV"; then
    [ "$(id -u)" = 0 ] && apt-get install -y -q python3-venv >/dev/null
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install -q playwright
fi
CHROMIUM="$CHROMIUM" "$VENV/bin/python" scripts/dashboard-browser-test.py "$BERTH" "$@"
