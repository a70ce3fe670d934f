#!/usr/bin/env bash
# Builds berth's tiny test guest from Debian packages and (with --url)
# uploads it to berth's image API, AMI style: a kernel image (aki), a
# ramdisk image (ari) and a small disk image (raw) whose kernel_id and
# ramdisk_id name them, which the libvirt driver boots directly.
#
# The guest is the Debian cloud kernel (linux-image-cloud-amd64) and a
# busybox-static initramfs whose /init loads the disk and cdrom drivers,
# mounts the config drive (label config-2), prints one marker line on the
# serial console
#   BERTH-GUEST-UP uuid=<instance uuid> key=<md5 fingerprint of the key>
# (the fingerprint as Nova shows it for the key pair, or "none"), then
# powers off on the ACPI power button (a clean `virsh shutdown`), or by
# itself after N seconds when its user data holds `poweroff-after=N`.
# A guest with virtio NICs asks DHCP on each and prints
#   BERTH-GUEST-NET eth0=<mac>/<address or none> ...
#
#   scripts/guest-image.sh --out DIR                 # build only
#   scripts/guest-image.sh --out DIR --url URL [--token T] [--name NAME]
#        # build and upload; prints IMAGE_ID=<disk image id>
set -euo pipefail

OUT=""
URL=""
TOKEN="${OS_TOKEN:-admin}"
NAME="berth-guest"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --url) URL="${2%/}"; shift 2 ;;
    --token) TOKEN="$2"; shift 2 ;;
    --name) NAME="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR [--url URL] [--token T] [--name NAME]" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# Bump when the guest changes: a kept build of another version is redone.
VERSION=3
if [ ! -s "$OUT/vmlinuz" ] || [ ! -s "$OUT/initrd" ] || [ "$(cat "$OUT/version" 2>/dev/null)" != "$VERSION" ]; then
  WORK=$(mktemp -d /tmp/berth-guest.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
  (
    cd "$WORK"
    # The metapackage names the versioned kernel package.
    KPKG=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
    [ -n "$KPKG" ] || { echo "linux-image-cloud-amd64 not known to apt (apt-get update?)" >&2; exit 1; }
    apt-get download "$KPKG" busybox-static >/dev/null 2>&1 || apt-get download "$KPKG" busybox-static
    for deb in ./*.deb; do dpkg -x "$deb" root; done
  )
  KVER=$(ls "$WORK/root/lib/modules")
  MODS="$WORK/root/lib/modules/$KVER"
  RD="$WORK/initrd"
  mkdir -p "$RD"/{bin,dev,proc,sys,mnt,lib/modules/"$KVER"}
  cp "$WORK/root/bin/busybox" "$RD/bin/busybox"
  # Drivers for the config drive on IDE (pc), virtio-blk and virtio-scsi,
  # the ACPI power button and the virtio NIC (the cloud kernel has no
  # other QEMU NIC driver), with what they depend on (from each module's
  # .modinfo `depends=`).
  want="virtio_pci virtio_blk virtio_scsi ata_piix ata_generic sr_mod sd_mod isofs button evdev virtio_net"
  done_mods=" "
  while [ -n "$want" ]; do
    set -- $want
    [ $# -gt 0 ] || break
    m=$1; shift; want="$*"
    case "$done_mods" in *" $m "*) continue ;; esac
    done_mods="$done_mods$m "
    f=$(find "$MODS/kernel" -name "$m.ko*" | head -n 1)
    [ -n "$f" ] || continue  # built in
    rel=${f#"$MODS/"}
    mkdir -p "$RD/lib/modules/$KVER/$(dirname "$rel")"
    cp "$f" "$RD/lib/modules/$KVER/$rel"
    deps=$(grep -a -o 'depends=[a-z_0-9,-]*' "$f" | head -n 1 | cut -d= -f2 | tr ',' ' ')
    want="$want $deps"
  done
  cat >"$RD/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
depmod 2>/dev/null
for m in virtio_pci virtio_blk virtio_scsi ata_piix ata_generic sr_mod sd_mod isofs button evdev virtio_net; do
  modprobe "$m" 2>/dev/null
done
mdev -s 2>/dev/null
uuid=unknown; key=none; after=""
for i in 1 2 3 4 5 6 7 8 9 10; do
  dev=$(findfs LABEL=config-2 2>/dev/null) && break
  sleep 0.2
done
if [ -n "${dev:-}" ] && mount -t iso9660 -o ro "$dev" /mnt 2>/dev/null; then
  meta=/mnt/openstack/latest/meta_data.json
  uuid=$(sed -n 's/.*"uuid": *"\([^"]*\)".*/\1/p' "$meta" | head -n 1)
  blob=$(tr ',{}' '\n\n\n' <"$meta" | sed -n 's/.*"ssh-[^ ]* \([A-Za-z0-9+/=]*\).*/\1/p' | head -n 1)
  if [ -n "$blob" ]; then
    key=$(echo "$blob" | base64 -d | md5sum | cut -c1-32 | sed 's/\(..\)/\1:/g; s/:$//')
  fi
  if [ -f /mnt/openstack/latest/user_data ]; then
    after=$(sed -n 's/.*poweroff-after=\([0-9]*\).*/\1/p' /mnt/openstack/latest/user_data | head -n 1)
  fi
fi
echo "BERTH-GUEST-UP uuid=$uuid key=$key" >/dev/ttyS0
# Each NIC: up, one DHCP try (QEMU's user-mode network answers 10.0.2.15).
mkdir -p /tmp
nets=""
for n in /sys/class/net/*; do
  name=${n##*/}
  [ "$name" = lo ] && continue
  ip link set "$name" up 2>/dev/null
  udhcpc -i "$name" -n -q -t 4 -T 1 -s /bin/dhcp-note >/dev/null 2>&1
  nets="$nets $name=$(cat "$n/address")/$(cat "/tmp/ip-$name" 2>/dev/null || echo none)"
done
[ -n "$nets" ] && echo "BERTH-GUEST-NET$nets" >/dev/ttyS0
if [ -n "$after" ]; then
  sleep "$after"
  echo "berth guest: powering off by itself" >/dev/ttyS0
  poweroff -f
fi
# The ACPI power button: the first event on its input device powers off.
for ev in /sys/class/input/event*; do
  if grep -q "Power Button" "$ev/device/name" 2>/dev/null; then
    (head -c 1 "/dev/input/$(basename "$ev")" >/dev/null; echo "berth guest: ACPI power button" >/dev/ttyS0; poweroff -f) &
  fi
done
while true; do sleep 3600; done
EOF
  chmod +x "$RD/init"
  cat >"$RD/bin/dhcp-note" <<'NOTE'
#!/bin/busybox sh
case "$1" in
  deconfig) ip link set "$interface" up ;;
  bound|renew) echo "$ip" >"/tmp/ip-$interface" ;;
esac
NOTE
  chmod +x "$RD/bin/dhcp-note"
  (cd "$RD" && find . | "$WORK/root/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$OUT/initrd"
  cp "$WORK/root/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
  echo "$VERSION" >"$OUT/version"
fi
# The disk: 1 MiB of zeros (the guest runs from its initramfs).
[ -s "$OUT/disk.raw" ] || truncate -s 1M "$OUT/disk.raw"
echo "built $OUT/vmlinuz $OUT/initrd $OUT/disk.raw" >&2
[ -n "$URL" ] || exit 0

# Upload: create, then PUT the bytes; prints the id.
upload() { # name disk_format container_format file [extra json]
  local body id
  body="{\"name\": \"$1\", \"disk_format\": \"$2\", \"container_format\": \"$3\", \"visibility\": \"public\"${5:+, $5}}"
  id=$(curl -sSf -X POST "$URL/image/v2/images" -H "X-Auth-Token: $TOKEN" -H 'Content-Type: application/json' \
    -d "$body" | sed -n 's/.*"id": *"\([0-9a-f-]*\)".*/\1/p' | head -n 1)
  [ -n "$id" ] || { echo "creating image $1 failed" >&2; exit 1; }
  curl -sSf -X PUT "$URL/image/v2/images/$id/file" -H "X-Auth-Token: $TOKEN" \
    -H 'Content-Type: application/octet-stream' --data-binary "@$4" >/dev/null
  echo "$id"
}
KERNEL=$(upload "$NAME-kernel" aki aki "$OUT/vmlinuz")
RAMDISK=$(upload "$NAME-ramdisk" ari ari "$OUT/initrd")
# no_timer_check: under TCG on a busy host the kernel's IO-APIC timer
# check can fail and panic ("IO-APIC + timer doesn't work!").
IMAGE=$(upload "$NAME" raw bare "$OUT/disk.raw" \
  "\"kernel_id\": \"$KERNEL\", \"ramdisk_id\": \"$RAMDISK\", \"os_command_line\": \"no_timer_check\"")
echo "KERNEL_ID=$KERNEL"
echo "RAMDISK_ID=$RAMDISK"
echo "IMAGE_ID=$IMAGE"
