#!/usr/bin/env bash
# Drives berth with the real OpenStack client (python-openstackclient +
# osc-placement, installed from PyPI into a venv on first use) and checks the
# answers: providers, inventories, classes, traits, aggregates, allocation
# candidates, allocations, usages. Starts its own berth on 127.0.0.1 and
# stops it by PID.
#   scripts/openstack-cli-smoke.sh            (builds target/release/berth, or uses $BERTH_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/osc-venv.sh
# BERTH_BIN: an already built binary (CI passes the test build's).
BERTH=${BERTH_BIN:-target/release/berth}
[ -n "${BERTH_BIN:-}" ] || cargo build --release --locked -q
DIR=$(mktemp -d /tmp/berth-osc.XXXXXX)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$BERTH" serve --listen "127.0.0.1:$PORT" --data-dir "$DIR" --log warn &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/" >/dev/null && break; sleep 0.05; done

# noauth2: the admin_token plugin sends X-Auth-Token: admin.
export OS_AUTH_TYPE=admin_token OS_TOKEN=admin OS_ENDPOINT="http://127.0.0.1:$PORT" OS_PLACEMENT_API_VERSION=1.39
os() { "$VENV/bin/openstack" --os-endpoint "$OS_ENDPOINT" "$@"; }
check() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got [$1] want [$2]" >&2; exit 1; fi; echo "ok: $3"; }

RP=$(os resource provider create cn1 -f value -c uuid)
check "$(os resource provider show "$RP" -f value -c name)" cn1 "provider create/show"
os resource provider inventory set "$RP" --resource VCPU=16 --resource MEMORY_MB=32768 --resource DISK_GB=500 \
   --resource VCPU:allocation_ratio=4.0 -f value >/dev/null
check "$(os resource provider inventory show "$RP" VCPU -f value -c allocation_ratio)" 4.0 "inventory set"
os resource class create CUSTOM_GPU_SLICE
check "$(os resource class show CUSTOM_GPU_SLICE -f value -c name)" CUSTOM_GPU_SLICE "resource class create"
os trait create CUSTOM_FAST
os resource provider trait set "$RP" --trait CUSTOM_FAST --trait HW_CPU_X86_AVX2 -f value >/dev/null
check "$(os resource provider trait list "$RP" -f value | sort | tr '\n' ' ')" "CUSTOM_FAST HW_CPU_X86_AVX2 " "provider traits"
AGG=$(python3 -c 'import uuid;print(uuid.uuid4())')
GEN=$(os resource provider show "$RP" -f value -c generation)
os resource provider aggregate set "$RP" --aggregate "$AGG" --generation "$GEN" -f value >/dev/null
check "$(os resource provider aggregate list "$RP" -f value -c uuid)" "$AGG" "aggregates"
check "$(os allocation candidate list --resource VCPU=2 --resource MEMORY_MB=1024 --required HW_CPU_X86_AVX2 \
          --member-of "$AGG" -f value -c 'resource provider' | sort -u)" "$RP" "allocation candidates"
C=$(python3 -c 'import uuid;print(uuid.uuid4())')
os resource provider allocation set "$C" --allocation "rp=$RP,VCPU=2,MEMORY_MB=1024" --project-id p1 --user-id u1 \
   --consumer-type INSTANCE -f value >/dev/null
check "$(os resource provider usage show "$RP" -f value | grep VCPU)" "VCPU 2" "allocation set + usage"
check "$(os resource usage show p1 -f value | cut -d' ' -f1)" INSTANCE "project usage by consumer type"
os resource provider allocation delete "$C"
check "$(os resource provider usage show "$RP" -f value | grep VCPU)" "VCPU 0" "allocation delete"
CHILD=$(os resource provider create numa0 --parent-provider "$RP" -f value -c uuid)
check "$(os resource provider show "$CHILD" -f value -c root_provider_uuid)" "$RP" "nested provider"
os resource provider delete "$CHILD"
os resource provider delete "$RP"
check "$(os resource provider list -f value | wc -l)" 0 "provider delete"
echo "openstack CLI smoke: all checks passed"
