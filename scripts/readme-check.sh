#!/usr/bin/env bash
# Runs the documented shell commands that need no external client (the
# blocks marked `<!-- readme-check ... -->`: README.md's "Querying
# placement", docs/BLAZAR.md's end-of-lease example) against a fresh
# `berth serve` started as the README's first command starts it
# (--fake-hosts 4, embedded SQLite), on a free loopback port instead of
# 8778, in the order the files are given. Every file given must hold at
# least one marked block. Any failing command fails the script. The binary
# is $BERTH_BIN (default target/debug/berth); the whole run is bounded to
# 30 s.
#
#   BERTH_BIN=target/release/berth scripts/readme-check.sh [FILE.md ...]
set -euo pipefail
cd "$(dirname "$0")/.."
BERTH_BIN="${BERTH_BIN:-target/debug/berth}"
if [ "$#" -gt 0 ]; then DOCS=("$@"); else DOCS=(README.md docs/BLAZAR.md); fi
DEADLINE=$((SECONDS + 30))

if [ ! -x "$BERTH_BIN" ]; then
  echo "readme-check: $BERTH_BIN not found (cargo build -p berth, or set BERTH_BIN)" >&2
  exit 1
fi
for tool in curl jq python3; do
  command -v "$tool" >/dev/null || { echo "readme-check: $tool is needed" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/berth-readme-check.XXXXXX)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# The marked blocks: the first ```sh fence after each marker line.
python3 - "${DOCS[@]}" >"$WORK/blocks.sh" <<'PY'
import sys
out = []
for path in sys.argv[1:]:
    lines = open(path, encoding="utf-8").read().split("\n")
    i, n = 0, 0
    while i < len(lines):
        if lines[i].startswith("<!-- readme-check"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```sh"):
                j += 1
            k = j + 1
            while k < len(lines) and lines[k] != "```":
                k += 1
            if k >= len(lines):
                sys.exit("readme-check: unterminated block after %s line %d" % (path, i + 1))
            n += 1
            out.append("echo '== %s block %d (line %d) =='" % (path, n, j + 1))
            out.extend(lines[j + 1:k])
            i = k
        i += 1
    if n == 0:
        sys.exit("readme-check: no <!-- readme-check --> block in " + path)
print("\n".join(out))
PY

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BERTH_BIN" serve --fake-hosts 4 --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" \
  >"$WORK/server.log" 2>&1 &
SERVER_PID=$!

until curl -sf -o /dev/null "http://127.0.0.1:$PORT/"; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "readme-check: berth exited at start:" >&2; cat "$WORK/server.log" >&2; exit 1
  fi
  if [ "$SECONDS" -ge "$DEADLINE" ]; then
    echo "readme-check: berth did not answer on port $PORT" >&2; exit 1
  fi
  sleep 0.1
done

# A reader runs the blocks once the fake hosts are up: wait (bounded) until
# all four are compute nodes (enrolling one in the pool needs it).
until [ "$(curl -sf -H 'X-Auth-Token: admin' "http://127.0.0.1:$PORT/compute/v2.1/os-hypervisors" |
          python3 -c 'import json,sys; print(len(json.load(sys.stdin)["hypervisors"]))' 2>/dev/null)" = 4 ]; do
  if [ "$SECONDS" -ge "$DEADLINE" ]; then
    echo "readme-check: the four fake hosts never came up" >&2; tail -n 20 "$WORK/server.log" >&2; exit 1
  fi
  sleep 0.1
done

# The documents' port is 8778; this server's is $PORT.
sed "s/127\.0\.0\.1:8778/127.0.0.1:$PORT/g" "$WORK/blocks.sh" >"$WORK/run.sh"
LEFT=$((DEADLINE - SECONDS))
if [ "$LEFT" -lt 1 ]; then LEFT=1; fi
if ! timeout "$LEFT" bash -euo pipefail "$WORK/run.sh"; then
  echo "readme-check: a documented command failed (commands in ${DOCS[*]}, server log below)" >&2
  tail -n 20 "$WORK/server.log" >&2
  exit 1
fi
echo "readme-check: ok ($SECONDS s)"
