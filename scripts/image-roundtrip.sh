#!/usr/bin/env bash
# The image data figures (issue 38): a SIZE_MIB (default 1024) file through
# `openstack image create --file` and `openstack image save`, `cmp`, berth's
# peak RSS over its idle RSS during each transfer, and MB/s against `cp` of
# the same file on the same disk, in the same run. One line per store and
# database:
#   scripts/image-roundtrip.sh                       # SQLite, filesystem store
#   DATABASE_URL=postgres://... scripts/image-roundtrip.sh   # PostgreSQL too
#   S3_URL=... S3_ACCESS_KEY=... S3_SECRET_KEY=... S3_BUCKET=... scripts/image-roundtrip.sh
#       # the object store too (eval "$(bash scripts/swift-throwaway.sh start)"
#       # and S3_URL=$SWIFT_S3_URL ... gives one)
# RUNS: which stores, `file`, `s3` or `file s3` (the default).
# BERTH_BIN: the binary (default target/release/berth, built if missing).
# WORK: where the files go (default a fresh directory under /tmp, on the
# disk the store uses).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/osc-venv.sh
BERTH=${BERTH_BIN:-target/release/berth}
[ -x "$BERTH" ] || cargo build --release --locked -q -p berth
SIZE_MIB=${SIZE_MIB:-1024}
WORK=${WORK:-$(mktemp -d /tmp/berth-roundtrip.XXXXXX)}
mkdir -p "$WORK"
PID=""
cleanup() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; fi; rm -rf "$WORK"; }
trap cleanup EXIT

F="$WORK/image.raw"
head -c $((SIZE_MIB << 20)) /dev/urandom >"$F"
sync
now() { date +%s.%N; }
mbps() { python3 -c "import sys; print(f'{$SIZE_MIB * 1.048576 / (float(sys.argv[2]) - float(sys.argv[1])):.0f}')" "$1" "$2"; }
rss() { awk -v f="$2" '$1 == f { print $2 }' "/proc/$1/status"; }

# `cp` of the same file on the same disk, synced: what the disk does.
t0=$(now); cp "$F" "$WORK/copy.raw"; sync; t1=$(now)
CP=$(mbps "$t0" "$t1"); rm -f "$WORK/copy.raw"; sync

run() {  # label, extra serve arguments...
  local label=$1; shift
  local dir="$WORK/$label" port
  mkdir -p "$dir"
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  "$BERTH" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --log warn "$@" &
  PID=$!
  for _ in $(seq 1 400); do curl -sf "http://127.0.0.1:$port/image/versions" >/dev/null && break; sleep 0.05; done
  cat >"$dir/clouds.yaml" <<EOF
clouds:
  berth:
    auth_type: admin_token
    auth: {token: admin, endpoint: http://127.0.0.1:$port/image}
    image_endpoint_override: http://127.0.0.1:$port/image
EOF
  export OS_CLIENT_CONFIG_FILE="$dir/clouds.yaml" OS_CLOUD=berth
  os() { "$VENV/bin/openstack" "$@" 2>>"$dir/osc.err"; }
  # Warm up (first-request paths, allocator arenas), then measure from idle.
  head -c 1048576 /dev/urandom >"$dir/warm"
  os image create --disk-format raw --container-format bare --file "$dir/warm" warm >/dev/null
  os image save --file "$dir/warm.out" warm
  local idle peak_up peak_down up down cli t
  # The client's own start (Python imports), included in every timing below.
  t=$(now); os image show warm -f value -c id >/dev/null; cli=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t" "$(now)")
  idle=$(rss "$PID" VmRSS:)
  echo 5 >"/proc/$PID/clear_refs"   # reset VmHWM: the peak from here on
  t0=$(now)
  os image create --disk-format raw --container-format bare --file "$F" big -f value -c id >/dev/null
  t1=$(now)
  peak_up=$(rss "$PID" VmHWM:)
  echo 5 >"/proc/$PID/clear_refs"
  t2=$(now)
  os image save --file "$dir/out.raw" big
  sync
  t3=$(now)
  peak_down=$(rss "$PID" VmHWM:)
  cmp "$F" "$dir/out.raw"
  [ "$(os image show big -f value -c checksum)" = "$(md5sum <"$F" | cut -d' ' -f1)" ]
  up=$(mbps "$t0" "$t1"); down=$(mbps "$t2" "$t3")
  printf '%-28s upload %5s MB/s  download %5s MB/s  (cp %s MB/s)  RSS idle %d MiB, peak +%d MiB up, +%d MiB down  cmp ok; times include the client start, %s s\n' \
    "$label" "$up" "$down" "$CP" $((idle / 1024)) $(((peak_up - idle) / 1024)) $(((peak_down - idle) / 1024)) "$cli"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  rm -rf "$dir"
}

echo "$SIZE_MIB MiB, $(nproc) cores, berth $("$BERTH" --version 2>/dev/null || echo '?')"
RUNS=" ${RUNS:-file s3} "   # which stores: file, s3 or both
if [[ $RUNS == *" file "* ]]; then
  run sqlite-file
  if [ -n "${DATABASE_URL:-}" ]; then
    run postgresql-file --database "$DATABASE_URL?schema=roundtrip_$$"
  fi
fi
if [ -n "${S3_URL:-}" ] && [[ $RUNS == *" s3 "* ]]; then
  S3=(--image-store "s3://${S3_BUCKET:-berth-images}/roundtrip-$$" --image-store-endpoint "$S3_URL"
      --image-store-access-key "$S3_ACCESS_KEY" --image-store-secret-key "$S3_SECRET_KEY")
  run sqlite-s3 "${S3[@]}"
  if [ -n "${DATABASE_URL:-}" ]; then
    run postgresql-s3 --database "$DATABASE_URL?schema=roundtrip_s3_$$" "${S3[@]}"
  fi
fi
