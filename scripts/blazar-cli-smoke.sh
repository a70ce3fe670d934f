#!/usr/bin/env bash
# Drives berth's reservation API with the real Blazar clients
# (python-blazarclient's `blazar` and its `openstack reservation` plugin,
# from PyPI, in a venv made on first use) with `--os-auth-type none`, the way
# an operator without Keystone would. Checks every answer. Starts its own
# berth (3 fake hosts) on 127.0.0.1 and stops it by PID.
#   scripts/blazar-cli-smoke.sh        (builds target/release/berth, or uses $BERTH_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/osc-venv.sh
BERTH=${BERTH_BIN:-target/release/berth}
[ -n "${BERTH_BIN:-}" ] || cargo build --release --locked -q
DIR=$(mktemp -d /tmp/berth-blazar.XXXXXX)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PORT=$(free_port)
RPORT=$(free_port)
# The reservation API also on its own port at /v1, as Blazar serves it.
"$BERTH" serve --listen "127.0.0.1:$PORT" --reservation-listen "127.0.0.1:$RPORT" --data-dir "$DIR/data" \
  --fake-hosts 3 --log warn &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/reservation/" >/dev/null 2>&1 && break; sleep 0.05; done
EP="http://127.0.0.1:$PORT/reservation/v1"
bz() { "$VENV/bin/blazar" --os-auth-type none --os-endpoint "$EP" "$@"; }
osr() { "$VENV/bin/openstack" --os-auth-type none --os-endpoint "$EP" reservation "$@"; }
check() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got [$1] want [$2]" >&2; exit 1; fi; echo "ok: $3"; }
json() { python3 -c "import sys,json; d=json.load(sys.stdin); print($1)"; }
# The in-process hosts register shortly after start.
for _ in $(seq 1 200); do
  n=$(curl -s -H 'X-Auth-Token: admin' "http://127.0.0.1:$PORT/compute/v2.1/os-hypervisors" | json 'len(d["hypervisors"])' 2>/dev/null || echo 0)
  [ "$n" = 3 ] && break; sleep 0.1
done

# Hosts: enrol two with extra capabilities, list, show, update, properties.
bz host-create --extra gpu=true --extra rack=r1 fake-0 -f value -c id >/dev/null
bz host-create --extra gpu=false fake-1 -f value -c id >/dev/null
check "$(bz host-list -f value -c hypervisor_hostname | sort | tr '\n' ' ')" "fake-0 fake-1 " "host-create --extra, host-list"
H0=$(bz host-list -f json | json '[h["id"] for h in d if h["hypervisor_hostname"]=="fake-0"][0]')
check "$(bz host-show "$H0" -f json | json 'd["gpu"]')" true "host-show extra capability"
bz host-update --extra rack=r2 "$H0" >/dev/null
check "$(bz host-show "$H0" -f json | json 'd["rack"]')" r2 "host-update --extra"
check "$(bz host-property-list -f value -c property | sort | tr '\n' ' ')" "gpu rack " "host-property-list"
bz host-property-set --private rack >/dev/null
check "$(bz host-property-list -f value -c property | tr '\n' ' ')" "gpu " "host-property-set --private hides it"
check "$(bz host-property-list --all -f value -c property | sort | tr '\n' ' ')" "gpu rack " "host-property-list --all"
if bz host-create fake-0 >/dev/null 2>&1; then echo "FAIL: enrolled twice" >&2; exit 1; fi
echo "ok: enrolling a host twice is refused"

# Leases: one GPU host in a window; the same window again is refused.
bz lease-create --physical-reservation 'min=1,max=1,hypervisor_properties=[">=", "$vcpus", "1"],resource_properties=["==", "$gpu", "true"]' \
  --start-date "2050-01-01 10:00" --end-date "2050-01-01 11:00" lease1 >/dev/null
L1=$(bz lease-show lease1 -f value -c id)
check "$(bz lease-show "$L1" -f value -c status)" PENDING "lease-create, lease-show"
check "$(bz lease-list -f value -c name)" lease1 "lease-list"
out=$(bz lease-create --physical-reservation 'min=1,max=1,hypervisor_properties=,resource_properties=["==", "$gpu", "true"]' \
  --start-date "2050-01-01 10:30" --end-date "2050-01-01 12:00" lease2 2>&1 || true)
case "$out" in *"Not enough hosts available"*) echo "ok: overlapping lease refused";; *) echo "FAIL: overlap: $out" >&2; exit 1;; esac
check "$(bz lease-list -f value -c name)" lease1 "refused lease left nothing"
bz lease-update --prolong-for 1h lease1 >/dev/null
check "$(bz lease-show lease1 -f value -c end_date)" "2050-01-01T12:00:00.000000" "lease-update --prolong-for"
check "$(bz allocation-list host -f json | json 'sum(len(a["reservations"]) for a in d)')" 1 "allocation-list host"
check "$(bz allocation-show host "$H0" -f json | json "'$L1' in str(d['reservations'])")" True "allocation-show host"
bz lease-delete lease1 >/dev/null
check "$(bz lease-list -f value -c name | wc -l)" 0 "lease-delete"

# An instance reservation: Blazar's private flavor appears with the lease.
bz lease-create --reservation 'resource_type=virtual:instance,vcpus=1,memory_mb=512,disk_gb=1,amount=2,affinity=False,resource_properties=' \
  --start-date "2050-03-01 10:00" --end-date "2050-03-01 11:00" slots >/dev/null
RID=$(curl -s -H 'X-Auth-Token: admin' "$EP/leases" | json '[l for l in d["leases"] if l["name"] == "slots"][0]["reservations"][0]["id"]')
check "$(curl -s -H 'X-Auth-Token: admin' "http://127.0.0.1:$PORT/compute/v2.1/flavors/$RID" | json 'd["flavor"]["name"]')" "reservation:$RID" "instance reservation flavor"
bz lease-delete slots >/dev/null
check "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Auth-Token: admin' "http://127.0.0.1:$PORT/compute/v2.1/flavors/$RID")" 404 "flavor gone with the lease"

# Blazar's own port and path (--reservation-listen): /v1.
check "$("$VENV/bin/blazar" --os-auth-type none --os-endpoint "http://127.0.0.1:$RPORT/v1" host-list -f value -c hypervisor_hostname | sort | tr '\n' ' ')" "fake-0 fake-1 " "--reservation-listen host-list"
check "$(curl -s "http://127.0.0.1:$RPORT/" | json 'd["versions"][0]["links"][0]["href"]')" "http://127.0.0.1:$RPORT/v1/" "--reservation-listen version document"

# The openstack CLI plugin.
osr lease create --reservation 'resource_type=physical:host,min=1,max=2,hypervisor_properties=,resource_properties=' \
  --start-date "2050-02-01 10:00" --end-date "2050-02-01 11:00" oslease >/dev/null
check "$(osr lease show oslease -f value -c status)" PENDING "openstack reservation lease create/show"
check "$(osr lease list -f value -c name)" oslease "openstack reservation lease list"
check "$(osr host list -f value -c hypervisor_hostname | sort | tr '\n' ' ')" "fake-0 fake-1 " "openstack reservation host list"
osr lease delete oslease >/dev/null
check "$(osr lease list -f value -c name | wc -l)" 0 "openstack reservation lease delete"
bz host-delete "$H0" >/dev/null
check "$(bz host-list -f value -c hypervisor_hostname)" fake-1 "host-delete"

# Reserved servers (issue 21): the openstack CLI boots with
# `--hint reserved=True --hint lease_params=...`; the server is RESERVED
# until its lease starts, and the lease is a Blazar lease on fake-1.
B="http://127.0.0.1:$PORT"
cat > "$DIR/clouds.yaml" <<EOF
clouds:
  berth:
    auth_type: admin_token
    auth: {token: admin, endpoint: $B/compute/v2.1}
    compute_endpoint_override: $B/compute/v2.1
    image_endpoint_override: $B/image
    identity_endpoint_override: $B/identity/v3
    identity_api_version: '3'
    compute_api_version: '2.96'
EOF
osc() { OS_CLIENT_CONFIG_FILE="$DIR/clouds.yaml" OS_CLOUD=berth "$VENV/bin/openstack" "$@"; }
osc flavor create --vcpus 1 --ram 256 --disk 1 tiny >/dev/null
head -c 4096 /dev/urandom > "$DIR/cirros.img"  # a boot needs an image with data
osc image create --disk-format qcow2 --container-format bare --public --file "$DIR/cirros.img" cirros >/dev/null
osc server create --flavor tiny --image cirros --nic none --hint reserved=True \
  --hint lease_params='{"name": "rsv-lease", "start": "2050-04-01 09:00", "end": "2050-04-01 17:00"}' rsv1 >/dev/null
check "$(osc server show rsv1 -f value -c status)" RESERVED "openstack server create --hint reserved=True (RESERVED)"
check "$(osc server list --name '^rsv1$' -f value -c Status)" RESERVED "openstack server list shows RESERVED"
check "$(bz lease-list -f value -c name)" rsv-lease "blazar lease-list shows the reserved server's lease"
check "$(bz lease-show rsv-lease -f value -c status)" PENDING "blazar lease-show (PENDING until the start)"
check "$(bz lease-show rsv-lease -f json | json '"virtual:instance" in str(d["reservations"])')" True "lease-show: one virtual:instance slot"
out=$(osc server create --flavor tiny --image cirros --nic none --hint reserved=True --hint lease_params='{"start": "2050-04-01 09:00"}' bad 2>&1 || true)
case "$out" in *"end is missing"*) echo "ok: bad lease_params refused";; *) echo "FAIL: bad lease_params: $out" >&2; exit 1;; esac
osc server delete --wait rsv1
check "$(bz lease-list -f value -c name | wc -l)" 0 "deleting the RESERVED server deletes its lease"
echo "blazar CLI smoke: all checks passed"
