#!/usr/bin/env bash
# Drives berth's compute API with the real OpenStack client
# (python-openstackclient from PyPI, in a venv made on first use) and no
# Keystone: a clouds.yaml with the admin_token plugin (noauth2 token
# `admin`) and per-service endpoint overrides. Checks every answer.
# Starts its own berth (4 fake hosts) on 127.0.0.1 and stops it by PID.
#   scripts/openstack-compute-smoke.sh        (builds target/release/berth, or uses $BERTH_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/osc-venv.sh
# BERTH_BIN: an already built binary (CI passes the test build's).
BERTH=${BERTH_BIN:-target/release/berth}
[ -n "${BERTH_BIN:-}" ] || cargo build --release --locked -q
DIR=$(mktemp -d /tmp/berth-osc-compute.XXXXXX)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
# Soft delete on (Nova's reclaim_instance_interval): `server delete` keeps a
# launched server SOFT_DELETED for an hour; `--force` deletes at once.
"$BERTH" serve --listen "127.0.0.1:$PORT" --data-dir "$DIR/data" --fake-hosts 4 --log warn \
  --reclaim-instance-interval 3600 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/compute/" >/dev/null && break; sleep 0.05; done
B="http://127.0.0.1:$PORT"
cat > "$DIR/clouds.yaml" <<EOF
clouds:
  berth:
    auth_type: admin_token
    auth: {token: admin, endpoint: $B/compute/v2.1}
    compute_endpoint_override: $B/compute/v2.1
    image_endpoint_override: $B/image
    placement_endpoint_override: $B
    identity_endpoint_override: $B/identity/v3
    identity_api_version: '3'
    compute_api_version: '2.96'
  berth-b:
    auth_type: admin_token
    auth: {token: 'demo:projb', endpoint: $B/compute/v2.1}
    compute_endpoint_override: $B/compute/v2.1
    image_endpoint_override: $B/image
    identity_endpoint_override: $B/identity/v3
    identity_api_version: '3'
EOF
export OS_CLIENT_CONFIG_FILE="$DIR/clouds.yaml" OS_CLOUD=berth
os() { "$VENV/bin/openstack" "$@"; }
check() { if [ "$1" != "$2" ]; then echo "FAIL: $3: got [$1] want [$2]" >&2; exit 1; fi; echo "ok: $3"; }
wait_status() {  # server status
  for _ in $(seq 1 200); do
    s=$(os server show "$1" -f value -c status 2>/dev/null || true)
    [ "$s" = "$2" ] && return 0; sleep 0.1
  done
  echo "FAIL: $1 never reached $2 (last: $s)" >&2; exit 1
}
# The in-process hosts report their inventory shortly after start.
for _ in $(seq 1 200); do [ "$(os hypervisor list -f value | wc -l)" = 4 ] && break; sleep 0.1; done

os flavor create --vcpus 1 --ram 256 --disk 1 tiny -f value -c id >/dev/null
check "$(os flavor show tiny -f value -c vcpus)" 1 "flavor create/show"
check "$(os flavor list -f value -c Name)" tiny "flavor list"
os flavor set --property hw:cpu_policy=shared tiny
check "$(os flavor show tiny -f json -c properties | python3 -c 'import sys,json;print(json.load(sys.stdin)["properties"]["hw:cpu_policy"])')" shared "flavor set --property"
if os flavor set --property trait:NO_SUCH_TRAIT=required tiny 2>/dev/null; then echo "FAIL: invalid extra spec accepted" >&2; exit 1; fi
echo "ok: invalid extra spec refused"

# Image data (issue 38): uploaded, checked and served back whole. A new
# image is queued until it has data, and a boot refuses it, as Nova does.
head -c 300000 /dev/urandom > "$DIR/cirros.img"
IMG=$(os image create --disk-format qcow2 --container-format bare --public --file "$DIR/cirros.img" cirros -f value -c id)
check "$(os image list --name cirros -f value -c ID)" "$IMG" "image create/list"
check "$(os image show cirros -f value -c status)" active "image create --file: active"
check "$(os image show cirros -f value -c size)" 300000 "image size"
check "$(os image show cirros -f value -c checksum)" "$(md5sum < "$DIR/cirros.img" | cut -d' ' -f1)" "image checksum (md5)"
# openstackclient does not show os_hash_value: ask the API.
check "$(curl -sf -H 'X-Auth-Token: admin' "$B/image/v2/images/$IMG" | python3 -c 'import sys,json;print(json.load(sys.stdin)["os_hash_value"])')" \
  "$(sha512sum < "$DIR/cirros.img" | cut -d' ' -f1)" "image os_hash_value (sha512)"
os image save --file "$DIR/cirros.out" cirros
cmp "$DIR/cirros.img" "$DIR/cirros.out"
echo "ok: image save returns the uploaded bytes"
# Through the API: openstackclient uploads its stdin when that is not a
# terminal (here it is not), which would make the image active.
curl -sf -H 'X-Auth-Token: admin' -H 'Content-Type: application/json' \
  -d '{"name": "empty", "disk_format": "qcow2", "container_format": "bare"}' "$B/image/v2/images" >/dev/null
check "$(os image show empty -f value -c status)" queued "image create without data: queued"
out=$(os server create --flavor tiny --image empty --nic none nodata 2>&1 || true)
case "$out" in *"is not active"*) echo "ok: boot from a queued image refused" ;;
  *) echo "FAIL: boot from a queued image: $out" >&2; exit 1 ;; esac
os image delete empty
# PATCH, tags, members and deactivation (issue 38). Project projb is a
# second cloud entry (noauth2 token `demo:projb`).
osb() { OS_CLOUD=berth-b "$VENV/bin/openstack" "$@"; }
os image set --tag boot --property hw_disk_bus=scsi cirros
check "$(os image show cirros -f json -c tags | python3 -c 'import sys,json;print(",".join(json.load(sys.stdin)["tags"]))')" boot "image set --tag"
check "$(os image show cirros -f json -c properties | python3 -c 'import sys,json;print(json.load(sys.stdin)["properties"]["hw_disk_bus"])')" scsi "image set --property"
check "$(os image list --tag boot -f value -c Name)" cirros "image list --tag"
os image unset --tag boot --property hw_disk_bus cirros
check "$(os image list --tag boot -f value -c Name)" "" "image unset --tag"
SH=$(os image create --shared --disk-format raw --container-format bare --file "$DIR/cirros.img" shared1 -f value -c id)
check "$(osb image show "$SH" -f value -c id 2>/dev/null || true)" "" "a shared image is hidden from other projects"
os image add project "$SH" projb >/dev/null
check "$(os image member list "$SH" -f value -c Status)" pending "image add project: pending"
check "$(osb image show "$SH" -f value -c name)" shared1 "a member sees a shared image"
check "$(osb image list -f value -c ID | grep -c "$SH" || true)" 0 "a pending share is not listed"
osb image set --accept --project projb "$SH"
check "$(os image member list "$SH" -f value -c Status)" accepted "image set --accept"
check "$(osb image list -f value -c ID | grep -c "$SH")" 1 "an accepted share is listed"
osb image save --file "$DIR/shared.out" "$SH" && cmp "$DIR/cirros.img" "$DIR/shared.out"
echo "ok: a member downloads a shared image"
os image remove project "$SH" projb
check "$(osb image show "$SH" -f value -c id 2>/dev/null || true)" "" "image remove project"
os image set --deactivate "$SH"
check "$(os image show "$SH" -f value -c status)" deactivated "image set --deactivate"
os image set --activate "$SH"
check "$(os image show "$SH" -f value -c status)" active "image set --activate"
os image set --protected "$SH"
if os image delete "$SH" 2>/dev/null; then echo "FAIL: a protected image deleted" >&2; exit 1; fi
os image set --unprotected "$SH"
os image delete "$SH"
echo "ok: image set --protected blocks delete"

# Reserved servers (issue 21): `--hint reserved=True --hint lease_params=...`
# admits a lease of one slot shaped like the flavor on an enrolled host; the
# server is RESERVED (no host) until the lease starts. fake-0 is enrolled
# for it (Blazar takes only a host without servers) and freed again after.
rsv() { curl -sf -H 'X-Auth-Token: admin' -H 'Content-Type: application/json' "$@"; }
RH=$(rsv -X POST -d '{"name": "fake-0"}' "$B/reservation/v1/os-hosts" | python3 -c 'import sys,json;print(json.load(sys.stdin)["host"]["id"])')
os server create --flavor tiny --image cirros --nic none --hint reserved=True \
  --hint lease_params='{"name": "rsv1-lease", "start": "2050-01-01 09:00", "end": "2050-01-01 17:00"}' rsv1 >/dev/null
check "$(os server show rsv1 -f value -c status)" RESERVED "server create --hint reserved=True (RESERVED)"
check "$(os server show rsv1 -f value -c OS-EXT-SRV-ATTR:host)" None "a RESERVED server has no host"
check "$(os server list --name '^rsv1$' -f value -c Status)" RESERVED "server list shows RESERVED"
check "$(rsv "$B/reservation/v1/leases" | python3 -c 'import sys,json;print([l["name"] for l in json.load(sys.stdin)["leases"]])')" "['rsv1-lease']" "the reserved server's lease"
os server delete --wait rsv1
check "$(rsv "$B/reservation/v1/leases" | python3 -c 'import sys,json;print(len(json.load(sys.stdin)["leases"]))')" 0 "server delete takes the RESERVED server's lease"
rsv -X DELETE "$B/reservation/v1/os-hosts/$RH"

os server create --flavor tiny --image cirros --nic none --wait vm1 -f value -c id >/dev/null
check "$(os server show vm1 -f value -c status)" ACTIVE "server create --wait"
check "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host | cut -c1-5)" fake- "server host"

os server create --flavor tiny --image cirros --nic none --min 3 --max 5 multi >/dev/null
for _ in $(seq 1 100); do [ "$(os server list --name '^multi' --status ACTIVE -f value | wc -l)" = 5 ] && break; sleep 0.1; done
check "$(os server list --name '^multi' --status ACTIVE -f value | wc -l)" 5 "server create --min 3 --max 5"

GID=$(os server group create --policy anti-affinity g1 -f value -c id)
check "$(os server group show g1 -f value -c policy)" anti-affinity "server group create/show"
check "$(os server group list -f value -c Name)" g1 "server group list"
os server create --flavor tiny --image cirros --nic none --hint group="$GID" --wait gm1 >/dev/null
os server create --flavor tiny --image cirros --nic none --hint group="$GID" --wait gm2 >/dev/null
H1=$(os server show gm1 -f value -c OS-EXT-SRV-ATTR:host); H2=$(os server show gm2 -f value -c OS-EXT-SRV-ATTR:host)
[ "$H1" != "$H2" ] || { echo "FAIL: anti-affinity members share $H1" >&2; exit 1; }
echo "ok: --hint group= (anti-affinity on $H1, $H2)"
check "$(os server group show g1 -f json -c members | python3 -c 'import sys,json;print(len(json.load(sys.stdin)["members"]))')" 2 "group members"

# Key pairs: generated by the server (below 2.92; the client generates
# locally from 2.92), imported, listed, shown, used by a boot, counted by
# the key_pairs quota, deleted.
os --os-compute-api-version 2.91 keypair create gen > "$DIR/gen.key"
check "$(head -1 "$DIR/gen.key")" "-----BEGIN OPENSSH PRIVATE KEY-----" "keypair create (generated by the server, 2.91)"
chmod 600 "$DIR/gen.key"
if command -v ssh-keygen >/dev/null; then
  check "$(ssh-keygen -y -f "$DIR/gen.key" | cut -d' ' -f1,2)" "$(os keypair show gen --public-key | cut -d' ' -f1,2)" "the generated private key is the pair of its public key"
fi
echo "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCsNe3/1ILNCqFyfYWDeTKLD6jEXC2OQHLmietMWW+/vdaZq7KZEwO0jhglaFjU1mpqq4Gz5RX156sCTNM9vRbwKAxfsdF9laBYVsex3m3Wmui3uYrKyumsoJn2g9GNnG1PI1mrVjZ61i0GY3khna+wzlTpCCmy5HNlrmbj3XLqBUpipTOXmsnr4sChzC53KCd8LXuwc1i/CZPvF+3XipvAgFSE53pCtLOeB1kYMOBaiUPLQTWXR3JpckqFIQwhIH0zoHlJvZE8hh90XcPojYN56tI0OlrGqojbediJYD0rUsJu4weZpbn8vilb3JuDY+jwssnSA8wzBx3A/8y9Pp1B nova@ubuntu" > "$DIR/imp.pub"
os keypair create --public-key "$DIR/imp.pub" imp >/dev/null
check "$(os keypair show imp -f value -c fingerprint)" 61:5f:fe:c7:e0:fd:d7:4a:2b:52:6e:a6:f5:bf:da:27 "keypair create --public-key (fingerprint as ssh-keygen -l -E md5)"
check "$(os keypair show imp -f value -c type)" ssh "keypair show (type)"
check "$(os keypair list -f value -c Name | tr '\n' ' ')" "gen imp " "keypair list"
if os keypair create --public-key "$DIR/imp.pub" imp >/dev/null 2>&1; then echo "FAIL: duplicate key pair accepted" >&2; exit 1; fi
echo "ok: keypair create refuses a name in use"
os server create --flavor tiny --image cirros --nic none --key-name imp --wait kvm >/dev/null
check "$(os server show kvm -f value -c key_name)" imp "server create --key-name (key_name shown)"
if os server create --flavor tiny --image cirros --nic none --key-name nokey kvm2 >/dev/null 2>&1; then echo "FAIL: unknown key name accepted" >&2; exit 1; fi
echo "ok: server create --key-name refuses an unknown key pair"
os server delete --force --wait kvm
os keypair delete gen
check "$(os keypair list -f value -c Name)" imp "keypair delete"
os quota set --key-pairs 1 admin
check "$(os quota show --compute admin -f json | python3 -c 'import sys,json;d=json.load(sys.stdin);r=[x for x in d if x["Resource"]=="key-pairs"] if isinstance(d,list) else None;print(r[0]["Limit"] if r else d.get("key_pairs", d.get("key-pairs")))')" 1 "quota set --key-pairs"
if os keypair create --public-key "$DIR/imp.pub" imp2 >/dev/null 2>&1; then echo "FAIL: key pair over quota accepted" >&2; exit 1; fi
echo "ok: keypair create refused over the key_pairs quota"
os quota set --key-pairs 100 admin

check "$(os server list -f value | wc -l)" 8 "server list"
check "$(os server list --long -f value -c Host | grep -c '^fake-')" 8 "server list --long"
check "$(os server list --sort-column Name -f value -c Name | head -1)" gm1 "server list --sort-column"
FIRST=$(os server list --limit 3 -f value -c ID | tail -1)
check "$(os server list --limit 3 --marker "$FIRST" -f value | wc -l)" 3 "server list --limit/--marker"

# Cold moves: resize with confirm and with revert, admin migrate, migration list.
flavor_of() { os server show "$1" -f json -c flavor | python3 -c 'import sys,json;f=json.load(sys.stdin)["flavor"];print(f.get("original_name") if isinstance(f,dict) else f.split(" ")[0])'; }
newest() { os server migration list --server "$1" -f value -c "$2" | head -1; }
os flavor create --vcpus 2 --ram 512 --disk 1 small -f value -c id >/dev/null
HOST0=$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)
os server resize --flavor small vm1
wait_status vm1 VERIFY_RESIZE
check "$(flavor_of vm1)" small "server resize --flavor (VERIFY_RESIZE shows the new flavor)"
check "$(newest vm1 Status)" finished "server migration list (finished)"
[ "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" != "$HOST0" ] || { echo "FAIL: resize stayed on $HOST0" >&2; exit 1; }
os server resize confirm vm1
wait_status vm1 ACTIVE
check "$(newest vm1 Status)" confirmed "server resize confirm"
os server resize --flavor tiny vm1
wait_status vm1 VERIFY_RESIZE
check "$(flavor_of vm1)" tiny "server resize to a smaller flavor"
os server resize revert vm1
wait_status vm1 ACTIVE
check "$(flavor_of vm1)" small "server resize revert restores the flavor"
check "$(newest vm1 Status)" reverted "server resize revert (migration reverted)"
HOST1=$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)
os server migrate vm1
wait_status vm1 VERIFY_RESIZE
[ "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" != "$HOST1" ] || { echo "FAIL: migrate stayed on $HOST1" >&2; exit 1; }
check "$(newest vm1 Type)" migration "server migrate (migration type)"
os server resize confirm vm1
wait_status vm1 ACTIVE
check "$(newest vm1 Status)" confirmed "server migrate + confirm"
check "$(os server migration list -f value -c Status | wc -l)" 3 "server migration list (all)"

# Evacuate: refused while the source's service is up; forced down (2.11
# `--down`), the server is rebuilt elsewhere (2.95: it ends SHUTOFF); the
# source's host (still running here) destroys its copy: migration completed.
wait_migration() {  # server status
  for _ in $(seq 1 200); do [ "$(newest "$1" Status)" = "$2" ] && return 0; sleep 0.1; done
  echo "FAIL: the newest migration of $1 never reached $2" >&2; exit 1
}
HOST2=$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)
if os --os-compute-api-version 2.95 server evacuate vm1 >/dev/null 2>&1; then
  echo "FAIL: evacuate accepted while $HOST2 is up" >&2; exit 1
fi
echo "ok: server evacuate refused while the source is up"
os --os-compute-api-version 2.11 compute service set --down "$HOST2" nova-compute
check "$(os compute service list --host "$HOST2" -f value -c State)" down "compute service set --down (2.11)"
os --os-compute-api-version 2.95 server evacuate vm1 >/dev/null
wait_status vm1 SHUTOFF
[ "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" != "$HOST2" ] || { echo "FAIL: evacuate stayed on $HOST2" >&2; exit 1; }
check "$(newest vm1 Type)" evacuation "server evacuate (2.95, migration type)"
wait_migration vm1 completed
echo "ok: server evacuate: the source cleaned up (migration completed)"
os --os-compute-api-version 2.11 compute service set --up "$HOST2" nova-compute
check "$(os compute service list --host "$HOST2" -f value -c State)" up "compute service set --up (2.11)"
os server start vm1
wait_status vm1 ACTIVE

# Live migration (2.30: to a named host; 2.34+: anywhere), listed with
# `server migration list --server` as `live-migration`, `completed`.
HOST3=$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)
LIVE_TO=$(os hypervisor list -f value -c "Hypervisor Hostname" | grep -vx "$HOST3" | grep -vx fake-3 | head -1)
os --os-compute-api-version 2.30 server migrate --live-migration --host "$LIVE_TO" vm1
wait_status vm1 ACTIVE
check "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" "$LIVE_TO" "server migrate --live-migration --host (2.30)"
check "$(newest vm1 Type)" live-migration "server migration list --server (live-migration)"
wait_migration vm1 completed
os --os-compute-api-version 2.68 server migrate --live-migration vm1
wait_status vm1 ACTIVE
[ "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" != "$LIVE_TO" ] || { echo "FAIL: live migration stayed on $LIVE_TO" >&2; exit 1; }
wait_migration vm1 completed
echo "ok: server migrate --live-migration (2.68, scheduled)"
check "$(os --os-compute-api-version 2.23 server migration list --server vm1 --type live-migration -f value -c Status | sort -u)" completed "server migration list --type live-migration"

# Snapshots: createImage and createBackup, uploaded by the host's agent
# through the image API; the compute API's image proxy (up to 2.35) shows
# them; a server boots from the snapshot.
os server image create --name vm1-snap --wait vm1 >/dev/null
check "$(os image show vm1-snap -f value -c status)" active "server image create (uploaded by the host)"
check "$(os image list --name vm1-snap -f value -c Name)" vm1-snap "image list: the snapshot"
check "$(os image show vm1-snap -f json -c properties | python3 -c 'import sys,json;p=json.load(sys.stdin)["properties"];print(p["image_type"], p["instance_uuid"])')" \
  "snapshot $(os server show vm1 -f value -c id)" "snapshot properties (image_type, instance_uuid)"
SNAP=$(os image show vm1-snap -f value -c id)
check "$(curl -sf -H 'X-Auth-Token: admin' -H 'OpenStack-API-Version: compute 2.35' "$B/compute/v2.1/images/$SNAP" | python3 -c 'import sys,json;i=json.load(sys.stdin)["image"];print(i["status"], i["progress"], i["metadata"]["image_type"])')" \
  "ACTIVE 100 snapshot" "the compute API's image proxy (2.35)"
check "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Auth-Token: admin' -H 'OpenStack-API-Version: compute 2.36' "$B/compute/v2.1/images")" 404 "the image proxy is gone from 2.36"
wait_status vm1 ACTIVE
os server create --flavor tiny --image vm1-snap --nic none --wait snapvm >/dev/null
check "$(os server show snapvm -f value -c status)" ACTIVE "server create from the snapshot"
os server delete --force --wait snapvm   # soft delete is on: --force deletes now
os server backup create --name vm1-bak --type daily --rotate 1 vm1 >/dev/null
for _ in $(seq 1 100); do [ "$(os image show vm1-bak -f value -c status 2>/dev/null)" = active ] && break; sleep 0.2; done
check "$(os image show vm1-bak -f value -c status)" active "server backup create: uploaded"
check "$(os image show vm1-bak -f json -c properties | python3 -c 'import sys,json;p=json.load(sys.stdin)["properties"];print(p["image_type"], p["backup_type"])')" \
  "backup daily" "server backup create"
wait_status vm1 ACTIVE
os image delete vm1-snap vm1-bak

# Shelve: offloaded at once (no host), unshelve schedules again; 2.91 to a host.
os server shelve vm1
wait_status vm1 SHELVED_OFFLOADED
check "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" None "server shelve (offloaded, no host)"
check "$(os image show vm1-shelved -f value -c status)" active "image show vm1-shelved (the shelve snapshot)"
os server unshelve vm1
wait_status vm1 ACTIVE
echo "ok: server unshelve"
check "$(os image list --name vm1-shelved -f value -c ID)" "" "image list: the snapshot went with the unshelve"
os server shelve vm1
wait_status vm1 SHELVED_OFFLOADED
os --os-compute-api-version 2.91 server unshelve --host fake-1 vm1
wait_status vm1 ACTIVE
check "$(os server show vm1 -f value -c OS-EXT-SRV-ATTR:host)" fake-1 "server unshelve --host (2.91)"

# Lock: the reason shows from 2.73; unlock frees the server again.
os --os-compute-api-version 2.73 server lock --reason maintenance vm1
check "$(os --os-compute-api-version 2.73 server show vm1 -f value -c locked_reason)" maintenance "server lock --reason (2.73)"
os server unlock vm1
check "$(os --os-compute-api-version 2.73 server show vm1 -f value -c locked)" False "server unlock"

# Pause/unpause and suspend/resume (the host's agent does them).
os server pause vm1
wait_status vm1 PAUSED
echo "ok: server pause"
os server unpause vm1
wait_status vm1 ACTIVE
echo "ok: server unpause"
os server suspend vm1
wait_status vm1 SUSPENDED
echo "ok: server suspend"
os server resume vm1
wait_status vm1 ACTIVE
echo "ok: server resume"

# The console log comes from the host's agent (the fake driver's boot lines).
check "$(os console log show vm1 | grep -c 'local-hostname: vm1' || true)" 1 "console log show"
check "$(os console log show --lines 1 vm1 | grep -c 'local-hostname' || true)" 0 "console log show --lines 1"

# Metadata (properties) and tags (2.26).
os server set --property role=web --property tier=1 vm1
check "$(os server show vm1 -f json -c properties | python3 -c 'import sys,json;print(sorted(json.load(sys.stdin)["properties"].items()))')" "[('role', 'web'), ('tier', '1')]" "server set --property"
os server unset --property tier vm1
check "$(os server show vm1 -f json -c properties | python3 -c 'import sys,json;print(sorted(json.load(sys.stdin)["properties"].items()))')" "[('role', 'web')]" "server unset --property"
os --os-compute-api-version 2.26 server set --tag blue --tag green vm1
check "$(os --os-compute-api-version 2.26 server show vm1 -f json -c tags | python3 -c 'import sys,json;print(sorted(json.load(sys.stdin)["tags"]))')" "['blue', 'green']" "server set --tag (2.26)"
check "$(os --os-compute-api-version 2.26 server list --tags blue -f value -c Name)" vm1 "server list --tags (2.26)"
os --os-compute-api-version 2.26 server unset --tag blue vm1
check "$(os --os-compute-api-version 2.26 server show vm1 -f json -c tags | python3 -c 'import sys,json;print(sorted(json.load(sys.stdin)["tags"]))')" "['green']" "server unset --tag (2.26)"

# os-resetState (admin): ERROR and back.
os server set --auto-approve --state error vm1
check "$(os server show vm1 -f value -c status)" ERROR "server set --state error (os-resetState)"
os server set --auto-approve --state active vm1
check "$(os server show vm1 -f value -c status)" ACTIVE "server set --state active"

# Rebuild: a new name and metadata; the host's agent re-spawns it.
os server rebuild --image "$IMG" --name vm1r --property rebuilt=yes --password rebuildPassw0rd --wait vm1 >/dev/null
check "$(os server show vm1r -f value -c status)" ACTIVE "server rebuild --wait"
check "$(os server show vm1r -f json -c properties | python3 -c 'import sys,json;print(json.load(sys.stdin)["properties"]["rebuilt"])')" yes "server rebuild --property"
os server set --name vm1 vm1r
# Rescue and unrescue.
os server rescue --password rescuePassw0rd vm1
wait_status vm1 RESCUE
echo "ok: server rescue"
os server unrescue vm1
wait_status vm1 ACTIVE
echo "ok: server unrescue"

# Soft delete (reclaim_instance_interval): delete, restore, force delete.
os server delete vm1
wait_status vm1 SOFT_DELETED
echo "ok: server delete (soft)"
os server restore vm1
wait_status vm1 ACTIVE
echo "ok: server restore"
os server delete --force --wait vm1
if os server show vm1 >/dev/null 2>&1; then echo "FAIL: vm1 still there" >&2; exit 1; fi
echo "ok: server delete --force --wait"

os quota set --instances 20 --cores 40 admin
check "$(os quota show --compute admin -f json | python3 -c 'import sys,json;d=json.load(sys.stdin);r=[x for x in d if x["Resource"]=="instances"] if isinstance(d,list) else None;print(r[0]["Limit"] if r else d.get("instances"))')" 20 "quota set/show"

check "$(os hypervisor list -f value | wc -l)" 4 "hypervisor list"
check "$(os hypervisor show fake-0 -f value -c hypervisor_hostname)" fake-0 "hypervisor show"

check "$(os compute service list -f value -c Binary | sort -u)" nova-compute "compute service list"
os compute service set --disable --disable-reason maintenance fake-3 nova-compute
check "$(os compute service list --host fake-3 -f value -c Status)" disabled "compute service set --disable"

os aggregate create agg1 >/dev/null
os aggregate add host agg1 fake-2 >/dev/null
os aggregate set --zone az1 agg1
check "$(os aggregate show agg1 -f value -c availability_zone)" az1 "aggregate create/add host/set --zone"
check "$(os availability zone list --compute -f value -c 'Zone Name' | grep -cx az1)" 1 "availability zone list"
check "$(os limits show --absolute -f value | awk '$1 == "max_total_instances" { print $2 }')" 20 "limits show"
echo "openstack compute CLI smoke: all checks passed"
