#!/usr/bin/env bash
# libvirt and QEMU for the real-guest tests (berth agent --driver libvirt).
#   eval "$(bash scripts/libvirt-throwaway.sh start)"  -> exports LIBVIRT_PIDS
#        (empty when a libvirtd already answered at qemu:///system)
#   bash scripts/libvirt-throwaway.sh stop "$LIBVIRT_PIDS"
# Installs the Debian packages when virsh, qemu-img, genisoimage or
# qemu-system-x86_64 is missing (as root; --no-install-recommends, as apt
# refuses the recommends on Debian 12 with "held broken packages"), with
# qemu-utils pinned to qemu-system-x86's version (a qemu-utils from
# backports breaks Debian 12's qemu-system-x86). No systemd: starts
# virtlogd and libvirtd itself and prints their PIDs. Gives /dev/kvm the
# group and mode udev gives it on Debian (root:kvm 0660): with a root-only
# /dev/kvm libvirt probes QEMU with KVM as root but finds KVM unusable for
# its qemu user, and throws its capability cache away at every call
# (each `virsh define` then takes a minute).
set -euo pipefail

cmd=${1:-start}
URI=qemu:///system

missing() {
  local tool
  for tool in virsh qemu-img genisoimage qemu-system-x86_64 libvirtd virtlogd; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || return 0
  done
  return 1
}

case "$cmd" in
start)
  if missing; then
    if [ "$(id -u)" != 0 ]; then
      echo "libvirt/QEMU missing and not root: cannot install them" >&2
      echo "export LIBVIRT_PIDS="
      exit 0
    fi
    {
      apt-get update -qq
      V=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ {print $2}')
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --allow-downgrades --no-install-recommends \
        qemu-system-x86 "qemu-utils=$V" libvirt-daemon-system libvirt-clients genisoimage
    } >&2
  fi
  if [ -e /dev/kvm ] && [ "$(id -u)" = 0 ] && getent group kvm >/dev/null; then
    chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
  fi
  PIDS=""
  if ! virsh -c "$URI" version >/dev/null 2>&1; then
    export PATH="$PATH:/usr/sbin"
    if ! pgrep -x virtlogd >/dev/null; then
      virtlogd -d
      sleep 0.2
      PIDS="$(pgrep -n -x virtlogd)"
    fi
    libvirtd -d
    for _ in $(seq 1 100); do
      virsh -c "$URI" version >/dev/null 2>&1 && break
      sleep 0.1
    done
    PIDS="$PIDS $(pgrep -n -x libvirtd)"
    virsh -c "$URI" version >/dev/null 2>&1 || { echo "libvirtd did not come up" >&2; }
  fi
  echo "export LIBVIRT_PIDS=\"${PIDS# }\""
  ;;
stop)
  for PID in ${2:-}; do
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && kill -KILL "$PID" 2>/dev/null || true
  done
  ;;
esac
