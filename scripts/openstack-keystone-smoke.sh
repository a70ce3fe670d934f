#!/usr/bin/env bash
# The real `openstack` CLI against berth with a real Keystone, the way a
# user of a deployed cloud works: password authentication, OS_AUTH_URL
# only, endpoints from Keystone's catalog (no endpoint overrides). Registers
# berth's endpoints with the commands docs/KEYSTONE.md gives, starts berth
# with --auth keystone (2 fake hosts) and checks every answer.
#   scripts/openstack-keystone-smoke.sh   (uses $BERTH_BIN or builds target/release/berth;
#   $BERTH_TEST_KEYSTONE_URL + $BERTH_TEST_KEYSTONE_ADMIN_PASSWORD, else a throwaway Keystone)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/osc-venv.sh
BERTH=${BERTH_BIN:-target/release/berth}
[ -n "${BERTH_BIN:-}" ] || cargo build --release --locked -q
DIR=$(mktemp -d /tmp/berth-osc-keystone.XXXXXX)
KS_PID="" KS_DIR="" PID=""
cleanup() {
  [ -n "$PID" ] && { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }
  [ -n "$KS_PID" ] && bash scripts/keystone-throwaway.sh stop "$KS_PID" "$KS_DIR"
  rm -rf "$DIR"
}
trap cleanup EXIT
if [ -n "${BERTH_TEST_KEYSTONE_URL:-}" ]; then
  KS_URL=$BERTH_TEST_KEYSTONE_URL KS_PW=$BERTH_TEST_KEYSTONE_ADMIN_PASSWORD
else
  eval "$(bash scripts/keystone-throwaway.sh start)"
  KS_URL=$KEYSTONE_URL KS_PW=$KEYSTONE_ADMIN_PASSWORD KS_PID=$KEYSTONE_PID KS_DIR=$KEYSTONE_DIR
fi
check() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got [$1] want [$2]" >&2; exit 1; fi; echo "ok: $3"; }
# One environment per identity: password auth and the catalog, nothing else.
as() {  # as USER PASSWORD PROJECT -- openstack args...
  local user=$1 pw=$2 project=$3; shift 4
  env -u OS_CLOUD -u OS_CLIENT_CONFIG_FILE OS_AUTH_URL="$KS_URL" OS_IDENTITY_API_VERSION=3 \
    OS_USERNAME="$user" OS_PASSWORD="$pw" OS_PROJECT_NAME="$project" \
    OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default OS_INTERFACE=public \
    "$VENV/bin/openstack" "$@"
}
admin() { as admin "$KS_PW" admin -- "$@"; }

PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
B="http://127.0.0.1:$PORT"
TAG=$RANDOM$RANDOM
# Identities: berth's own service user, and a project with a member.
admin project create --domain default "service-$TAG" -f value -c id >/dev/null
admin user create --domain default --password "berth-pw" "berth-$TAG" -f value -c id >/dev/null
admin role add --project "service-$TAG" --user "berth-$TAG" service
admin project create --domain default "demo-$TAG" -f value -c id >/dev/null
admin user create --domain default --password "demo-pw" "demo-$TAG" -f value -c id >/dev/null
admin role add --project "demo-$TAG" --user "demo-$TAG" member
admin role add --project "demo-$TAG" --user "demo-$TAG" reader
# The catalog (docs/KEYSTONE.md). Removed again at the end; entries of these
# types an earlier, interrupted run left in a shared Keystone go first.
for sid in $(admin service list -f value -c ID -c Type | awk '$2 ~ /^(placement|compute|image|reservation)$/ {print $1}'); do
  admin service delete "$sid"
done
SERVICES=""
for svc in "placement placement $B" "nova compute $B/compute/v2.1" "glance image $B/image" \
           "blazar reservation $B/reservation/v1"; do
  set -- $svc
  SID=$(admin service create --name "$1" "$2" -f value -c id)
  SERVICES="$SERVICES $SID"
  for iface in public internal admin; do
    admin endpoint create --region RegionOne "$SID" "$iface" "$3" -f value -c id >/dev/null
  done
done

"$BERTH" serve --listen "127.0.0.1:$PORT" --data-dir "$DIR/data" --fake-hosts 2 --log warn \
  --auth keystone --keystone-url "$KS_URL" --keystone-user "berth-$TAG" --keystone-password berth-pw \
  --keystone-project "service-$TAG" &
PID=$!
for _ in $(seq 1 200); do curl -sf "$B/compute/" >/dev/null && break; sleep 0.05; done
for _ in $(seq 1 200); do [ "$(admin hypervisor list -f value 2>/dev/null | wc -l)" = 2 ] && break; sleep 0.2; done
check "$(admin hypervisor list -f value -c 'Hypervisor Hostname' | sort | tr '\n' ' ')" "fake-0 fake-1 " "admin: hypervisor list (in-process hosts authenticated as berth's service user)"
check "$(admin resource provider list -f value -c name | sort | tr '\n' ' ')" "fake-0 fake-1 " "admin: resource provider list"

admin reservation host create fake-1 -f value -c id >/dev/null
check "$(admin reservation host list -f value -c hypervisor_hostname)" fake-1 "admin: reservation host create"
admin flavor create --vcpus 1 --ram 256 --disk 1 tiny -f value -c id >/dev/null
head -c 4096 /dev/urandom > "$DIR/cirros.img"  # a boot needs an image with data
IMG=$(admin image create --disk-format qcow2 --container-format bare --public --file "$DIR/cirros.img" cirros -f value -c id)
check "$(as "demo-$TAG" demo-pw "demo-$TAG" -- image list -f value -c ID)" "$IMG" "member: image list"

demo() { as "demo-$TAG" demo-pw "demo-$TAG" -- "$@"; }
demo server create --flavor tiny --image cirros --nic none --wait vm1 -f value -c id >/dev/null
check "$(demo server show vm1 -f value -c status)" ACTIVE "member: server create --wait"
check "$(demo server list -f value -c Name)" vm1 "member: server list"
PROJECT_ID=$(admin project show "demo-$TAG" -f value -c id)
check "$(demo server show vm1 -f value -c project_id)" "$PROJECT_ID" "the server belongs to the Keystone project"
check "$(admin server list --all-projects -f value -c Name)" vm1 "admin: server list --all-projects"
if demo resource provider list >/dev/null 2>&1; then echo "FAIL: a member listed resource providers" >&2; exit 1; fi
echo "ok: member: resource provider list refused"

demo reservation lease create --reservation \
  'resource_type=virtual:instance,vcpus=1,memory_mb=256,disk_gb=1,amount=1,affinity=False' \
  --start-date "2050-03-01 10:00" --end-date "2050-03-01 11:00" lease1 >/dev/null
check "$(demo reservation lease show lease1 -f value -c status)" PENDING "member: reservation lease create/show"
check "$(demo reservation lease list -f value -c name)" lease1 "member: reservation lease list"
demo reservation lease delete lease1 >/dev/null
check "$(demo reservation lease list -f value -c name | wc -l)" 0 "member: reservation lease delete"

demo server delete --wait vm1
check "$(demo server list -f value | wc -l)" 0 "member: server delete --wait"
# Clean the catalog of a shared Keystone (a service goes with its endpoints).
for sid in $SERVICES; do admin service delete "$sid"; done
echo "openstack keystone smoke: all checks passed"
