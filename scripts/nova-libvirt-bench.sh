#!/usr/bin/env bash
# Real guests side by side (issue 39, must-show 2): the real Nova 34 libvirt driver
# (compute_driver=libvirt.LibvirtDriver, [libvirt] virt_type=qemu) and berth's libvirt agent, on this
# machine, with the same guest (scripts/guest-image.sh: AMI style, 1 vCPU, 128 MiB, 1 GB disk, config drive).
#
#   scripts/nova-libvirt-bench.sh [--berth BIN] [--guests 3] [--runs 2] [--out FILE] [--work DIR]
#
# Per run, alternating, each side on a fresh instances path (cold image cache), then again after deleting
# the first guests (warm):
#   nova   nova/nova_reference.sh start 1 with DRIVER=libvirt (real placement, API, conductor, scheduler,
#          one libvirt nova-compute) and GLANCE_URL = a berth server's image API (berth serve, noauth2) that
#          holds the guest; timed by scripts/guest-bench.py (--agent-pid nova-compute).
#   berth  `BIN bench guests` (its own server and `--driver libvirt` agent) and, with the same client as
#          the nova side, berth serve + berth agent --driver libvirt timed by scripts/guest-bench.py
#          (--agent-pid the agent): the agent drives libvirt through `virsh` child processes, which
#          `bench guests` does not count; guest-bench.py's agent_cpu_ms_per_guest_with_children does.
# Prints (and writes to --out) one JSON document: per side, run and cache round active_p50_ms,
# active_p99_ms, marker_p50_ms, marker_p99_ms, agent_cpu_ms_per_guest (+ _with_children), agent_rss_mib,
# qemu_overhead_mib (QEMU RSS per guest minus the guest's 128 MiB), and the load average.
# Also keeps one guest's domain XML of each side (virsh dumpxml) in WORK/xml.
#
# Needs (root, Debian 12): what scripts/libvirt-throwaway.sh installs (it starts libvirtd/virtlogd when
# none answers and they are stopped at the end), libvirt-dev pkg-config python3-dev gcc (installed when
# missing) for libvirt-python in the nova venv, MariaDB (root via socket) and RabbitMQ running, PyPI for
# the venvs on first use (nova_reference.sh). Each Nova start waits until the libvirtd lists no domain
# (nova-compute refuses to start as a new service on a hypervisor with guests, another test's included).
# Stops everything it started, by PID, on exit (and undefines guests a failed Nova run left behind).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BIN=""; GUESTS=3; RUNS=2; OUT=""; WORK=/tmp/nova-libvirt-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --berth) BIN="$2"; shift 2 ;;
    --guests) GUESTS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    *) sed -n 2,27p "$0"; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  for b in "$ROOT/target/release/berth" "$ROOT/target/debug/berth"; do [ -x "$b" ] && { BIN=$b; break; }; done
fi
[ -x "$BIN" ] || { echo "no berth binary (--berth BIN)" >&2; exit 2; }
OUT=${OUT:-$WORK/result.json}
GUEST_DIR=$WORK/guest
IMG_PORT=18900 BERTH_PORT=18901
rm -rf "$WORK"; mkdir -p "$WORK/xml" "$WORK/log"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

LIBVIRT_PIDS="" IMG_PID="" SERVE_PID="" AGENT_PID="" WATCH_PID="" NOVA_UP=0
cleanup() {
  set +e
  [ "$NOVA_UP" = 1 ] && { reap_nova_domains; bash "$HERE/nova/nova_reference.sh" stop >/dev/null 2>&1; }
  for p in $WATCH_PID $AGENT_PID $SERVE_PID $IMG_PID; do kill "$p" 2>/dev/null; done
  [ -n "$LIBVIRT_PIDS" ] && bash "$HERE/libvirt-throwaway.sh" stop "$LIBVIRT_PIDS"
}
trap cleanup EXIT

# 1. libvirt + QEMU, the build deps of libvirt-python, the guest.
eval "$(bash "$HERE/libvirt-throwaway.sh" start)"
if ! dpkg -s libvirt-dev pkg-config python3-dev >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvirt-dev pkg-config python3-dev gcc >&2
fi
bash "$HERE/guest-image.sh" --out "$GUEST_DIR" >&2

# One guest domain's XML per side, read (never changed) as soon as it runs.
watch_xml() {  # side name-pattern text-the-XML-must-hold (other domains on this libvirtd are left alone)
  local x
  for _ in $(seq 600); do
    for d in $(virsh -c qemu:///system list --name 2>/dev/null | grep -E "$2"); do
      x=$(virsh -c qemu:///system dumpxml "$d" 2>/dev/null) || continue
      case "$x" in *"$3"*) echo "$x" > "$WORK/xml/$1.xml"; return 0 ;; esac
    done
    sleep 0.5
  done
}

# 2. The image service nova uses: a berth server's Glance-compatible image API holding the guest.
"$BIN" serve --listen 127.0.0.1:$IMG_PORT --data-dir "$WORK/image-server" > "$WORK/log/image-server.log" 2>&1 &
IMG_PID=$!
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:$IMG_PORT/image/ && break; sleep 0.2; done
GUEST_IMAGE=$(bash "$HERE/guest-image.sh" --out "$GUEST_DIR" --url http://127.0.0.1:$IMG_PORT --token admin |
  sed -n 's/^IMAGE_ID=//p')
log "image server pid $IMG_PID, image $GUEST_IMAGE"

reap_nova_domains() {  # guests nova left behind (a failed run): only those under this run's instances path
  local d
  [ -n "${NOVA_STATE:-}" ] || return 0
  for d in $(virsh -c qemu:///system list --all --name 2>/dev/null | grep -E '^instance-[0-9a-f]{8}$'); do
    if virsh -c qemu:///system dumpxml "$d" 2>/dev/null | grep -q "$NOVA_STATE/compute1/instances/"; then
      virsh -c qemu:///system destroy "$d" >/dev/null 2>&1 || true
      virsh -c qemu:///system undefine "$d" >/dev/null 2>&1 || true
    fi
  done
}

nova_run() {  # run
  log "nova run $1: starting (load $(load))"
  DRIVER=libvirt GLANCE_URL=http://127.0.0.1:$IMG_PORT/image bash "$HERE/nova/nova_reference.sh" start 1 \
    > "$WORK/nova.env" 2> "$WORK/log/nova-start-$1.err"
  NOVA_UP=1
  # shellcheck disable=SC1091
  . "$WORK/nova.env"   # (its IMAGE_ID is fake_glance's: the guest is $GUEST_IMAGE)
  [ "$1" = 1 ] && { watch_xml nova '^instance-[0-9a-f]{8}$' '<nova:instance' & WATCH_PID="$WATCH_PID $!"; }
  log "nova run $1: nova-compute pid $COMPUTE1_PID (load $(load))"
  python3 "$HERE/guest-bench.py" --url "$NOVA_URL" --compute-path '' --image "$GUEST_IMAGE" --n "$GUESTS" \
    --rounds cold,warm --agent-pid "$COMPUTE1_PID" \
    --helper-match "privsep-helper --config-file $NOVA_STATE/compute1.conf" --json "$WORK/nova-$1.json" >&2 ||
    log "nova run $1: guest-bench.py failed"
  reap_nova_domains
  cp "$NOVA_STATE/compute1/log/nova-compute.log" "$WORK/log/nova-compute-$1.log" 2>/dev/null || true
  bash "$HERE/nova/nova_reference.sh" stop >&2
  NOVA_UP=0
}

berth_bench_run() {  # run: berth's own benchmark
  log "berth bench guests run $1 (load $(load))"
  "$BIN" bench guests --guests "$GUESTS" --guest-dir "$GUEST_DIR" --json "$WORK/berth-bench-$1.json" >&2 ||
    log "berth bench guests run $1 failed"
}

berth_client_run() {  # run: berth serve + agent, timed by the same client as nova
  local dir=$WORK/berth-$1 url=http://127.0.0.1:$BERTH_PORT id
  mkdir -p "$dir/instances"
  log "berth (guest-bench.py) run $1 (load $(load))"
  "$BIN" serve --listen 127.0.0.1:$BERTH_PORT --data-dir "$dir/data" > "$WORK/log/berth-serve-$1.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 100); do curl -sf -o /dev/null $url/image/ && break; sleep 0.2; done
  "$BIN" agent --url $url --log warn --driver libvirt --virt-type qemu --libvirt-uri qemu:///system \
    --host "nlb-berth-$1" --instances-path "$dir/instances" --reserved-host-memory-mb 256 \
    --report-interval-secs 10 --sync-interval-secs 5 > "$WORK/log/berth-agent-$1.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 120); do
    n=$(curl -s -H 'X-Auth-Token: admin' $url/compute/v2.1/os-hypervisors |
      python3 -c 'import sys,json; print(len(json.load(sys.stdin)["hypervisors"]))' 2>/dev/null || echo 0)
    [ "$n" -ge 1 ] && break; sleep 0.5
  done
  id=$(bash "$HERE/guest-image.sh" --out "$GUEST_DIR" --url $url --token admin | sed -n 's/^IMAGE_ID=//p')
  [ "$1" = 1 ] && { watch_xml berth '^instance-[0-9a-f]{8}-' "nlb-berth-$1" & WATCH_PID="$WATCH_PID $!"; }
  python3 "$HERE/guest-bench.py" --url $url --image "$id" --n "$GUESTS" --rounds cold,warm \
    --agent-pid "$AGENT_PID" --json "$WORK/berth-client-$1.json" >&2 || log "berth run $1: guest-bench.py failed"
  kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true; AGENT_PID=""
  kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=""
}

for run in $(seq 1 "$RUNS"); do
  nova_run "$run"
  berth_bench_run "$run"
  berth_client_run "$run"
done

python3 - "$WORK" "$RUNS" "$GUESTS" > "$OUT" <<'EOF'
import json, sys
work, runs, guests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rows(doc, source):
    out = []
    for r in doc["rounds"]:
        row = {
            "cache": r["cache"],
            "active_p50_ms": r["active_ms"]["p50"], "active_p99_ms": r["active_ms"]["p99"],
            "marker_p50_ms": r["marker_ms"]["p50"], "marker_p99_ms": r["marker_ms"]["p99"],
            "agent_cpu_ms_per_guest": r.get("agent_cpu_ms_per_guest"),
            "agent_rss_mib": r.get("agent_rss_mib"),
            "qemu_overhead_mib": r.get("overhead_mib_per_guest"),
            "source": source,
        }
        for k in ("agent_cpu_ms_per_guest_with_children", "agent_cpu_ms_per_guest_to_active",
                  "agent_cpu_ms_per_guest_to_active_with_children", "console_calls",
                  "agent_helpers_rss_mib", "agent_peak_rss_mib",
                  "agent_rss_mib_per_guest", "loadavg", "failures"):
            if k in r:
                row[k] = r[k]
        out.append(row)
    return out
result = {"guests": guests, "ram_mb": 128, "virt_type": "qemu", "nova": [], "berth_bench": [], "berth_client": []}
for run in range(1, runs + 1):
    for side, name, source in (("nova", "nova-%d.json", "guest-bench.py"),
                               ("berth_bench", "berth-bench-%d.json", "berth bench guests"),
                               ("berth_client", "berth-client-%d.json", "guest-bench.py")):
        try:
            doc = json.load(open("%s/%s" % (work, name % run)))
        except (OSError, ValueError):
            continue
        result[side].append({"run": run, "rounds": rows(doc, source)})
print(json.dumps(result, indent=2))
EOF
cat "$OUT"
log "done: $OUT, domain XML in $WORK/xml"
