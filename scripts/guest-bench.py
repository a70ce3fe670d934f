#!/usr/bin/env python3
"""Boot N real guests through a compute API and time them: request ->
ACTIVE and request -> the guest's marker line (`BERTH-GUEST-UP
uuid=<its uuid>`, read through os-getConsoleOutput), then delete them.

    scripts/guest-bench.py --url http://127.0.0.1:8778 --image IMAGE_ID [--n 4] [--flavor ID]

The image is the one scripts/guest-image.sh uploads. Prints one line per
guest and p50/max of both times. Standard library only.

It also drives a real Nova (issue 39, scripts/nova-libvirt-bench.sh):

    scripts/guest-bench.py --url http://127.0.0.1:18774/v2.1 --compute-path '' \\
        --image IMAGE_ID --n 3 --rounds cold,warm --agent-pid PID --json F

--compute-path is the compute API's path under --url (berth:
/compute/v2.1, Nova: empty). With --rounds the guests are booted once per
named round (deleted, and waited for until gone, between rounds); with
--agent-pid each round also records that process's CPU time per guest
and RSS (from /proc, as `berth bench guests` does for its agent) and each
guest's QEMU RSS minus --ram-mb; --json writes the figures in the shape
of `berth bench guests --json`.
"""
import argparse
import json
import os
import threading
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def call(base, method, path, body=None, token="admin"):
    req = urllib.request.Request(base + path, method=method)
    req.add_header("X-Auth-Token", token)
    req.add_header("OpenStack-API-Version", "compute 2.79")
    req.add_header("X-OpenStack-Nova-API-Version", "2.79")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data, timeout=60) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as err:
        text = err.read()
        try:
            return err.code, json.loads(text) if text else None
        except ValueError:
            return err.code, {"text": text.decode(errors="replace")}
    except OSError as err:  # a reset connection under load: treat as "no answer yet"
        return 0, {"error": str(err)}


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def cpu_ticks(pid, children=False):
    """utime+stime of pid (plus its reaped children's with children=True)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def status_mib(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def descendants(pid):
    out = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                for c in f.read().split():
                    out.append(int(c))
                    out.extend(descendants(int(c)))
    except OSError:
        pass
    return out


def matching(pattern):
    """Processes whose command line (space-joined) contains pattern."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if pattern in cmd:
                out.append(int(name))
    return out


def helpers(args):
    """The agent's live helper processes: its descendants and, with
    --helper-match, daemons it started that left its tree (Nova's privsep
    daemon is reparented to init)."""
    pids = set(descendants(args.agent_pid))
    if args.helper_match:
        pids.update(matching(args.helper_match))
    pids.discard(args.agent_pid)
    return sorted(pids)


def qemu_pid(uuid):
    """The QEMU process whose command line names the guest's uuid (berth:
    -name guest=instance-<uuid>; Nova: -uuid <uuid>)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if cmd and b"qemu-system" in cmd[0] and any(uuid.encode() in a for a in cmd):
            return int(name)
    return None


def boot_round(base, args, flavor, tag):
    results = {}
    lock = threading.Lock()
    shared = {"active": 0, "console_calls": 0, "cpu_at_active": None}

    def sample():
        pid = args.agent_pid
        return (cpu_ticks(pid), cpu_ticks(pid, True) + sum(cpu_ticks(k) for k in helpers(args))) if pid else (0, 0)

    def one(i):
        start = time.monotonic()
        status, body = call(base, "POST", "/servers", {"server": {
            "name": "bench-%s%d" % (tag, i), "flavorRef": flavor, "imageRef": args.image, "networks": "none"}})
        if status != 202:
            results[i] = ("boot answered %s: %s" % (status, body), None, None)
            return
        sid = body["server"]["id"]
        active = marker = None
        deadline = start + args.timeout
        while time.monotonic() < deadline and marker is None:
            if active is None:
                _, shown = call(base, "GET", "/servers/" + sid)
                state = shown["server"]["status"] if shown and "server" in shown else "?"
                if state == "ERROR":
                    print("guest %d %s ERROR: %s" % (i, sid, shown["server"].get("fault")))
                    break
                if state == "ACTIVE":
                    active = time.monotonic() - start
                    with lock:  # the last guest ACTIVE: the agent's CPU so far is all build work
                        shared["active"] += 1
                        if shared["active"] == args.n:
                            shared["cpu_at_active"] = sample()
            if active is not None:
                with lock:
                    shared["console_calls"] += 1
                _, out = call(base, "POST", "/servers/%s/action" % sid, {"os-getConsoleOutput": {}})
                if out and "BERTH-GUEST-UP uuid=" + sid in (out.get("output") or ""):
                    marker = time.monotonic() - start
            time.sleep(0.1)
        results[i] = (sid, active, marker)

    pid = args.agent_pid
    base_sample = sample()
    cpu0 = cpu_ticks(pid) if pid else 0
    cpuc0 = cpu_ticks(pid, True) if pid else 0
    kids0 = {k: cpu_ticks(k) for k in helpers(args)} if pid else {}
    rss0 = status_mib(pid, "VmRSS:") if pid else 0.0
    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Sampled with every guest up: the agent and each guest's QEMU.
    fig = {}
    if pid:
        kids = {k: cpu_ticks(k) for k in helpers(args)}
        fig["agent_cpu_ms_per_guest"] = (cpu_ticks(pid) - cpu0) * 1000.0 / CLK_TCK / args.n
        # its reaped children (qemu-img, genisoimage, ...) and its live helpers (privsep daemons) too
        fig["agent_cpu_ms_per_guest_with_children"] = (
            (cpu_ticks(pid, True) - cpuc0) + sum(v - kids0.get(k, 0) for k, v in kids.items())
        ) * 1000.0 / CLK_TCK / args.n
        if shared["cpu_at_active"]:
            # up to the last ACTIVE: build work only (the console polls, which go to the agent on both
            # sides, start per guest at its ACTIVE; their count differs with the time to the marker)
            a, b = shared["cpu_at_active"]
            fig["agent_cpu_ms_per_guest_to_active"] = (a - base_sample[0]) * 1000.0 / CLK_TCK / args.n
            fig["agent_cpu_ms_per_guest_to_active_with_children"] = (b - base_sample[1]) * 1000.0 / CLK_TCK / args.n
        fig["console_calls"] = shared["console_calls"]
        rss = status_mib(pid, "VmRSS:")
        fig["agent_rss_mib"] = rss
        fig["agent_rss_mib_per_guest"] = max(0.0, rss - rss0) / args.n
        fig["agent_peak_rss_mib"] = status_mib(pid, "VmHWM:")
        fig["agent_helpers_rss_mib"] = sum(status_mib(k, "VmRSS:") for k in kids)
    qemu = []
    actives, markers, failures = [], [], []
    for i in range(args.n):
        sid, active, marker = results.get(i, ("no result (client thread failed)", None, None))
        print("guest %d %s: ACTIVE %s s, marker %s s" % (
            i, sid, "%.2f" % active if active else "-", "%.2f" % marker if marker else "-"))
        if active:
            actives.append(active)
        if marker:
            markers.append(marker)
        else:
            failures.append(sid)
        if sid and len(sid) == 36:
            q = qemu_pid(sid)
            if q:
                qemu.append(status_mib(q, "VmRSS:"))
    ids = [r[0] for r in results.values() if r[0] and len(r[0]) == 36]
    for sid in ids:
        call(base, "DELETE", "/servers/" + sid)
    deadline = time.monotonic() + 180
    for sid in ids:
        while time.monotonic() < deadline and call(base, "GET", "/servers/" + sid)[0] != 404:
            time.sleep(0.25)
    if actives:
        print("to ACTIVE: p50 %.2f s, max %.2f s (%d of %d)" % (pct(actives, 50), max(actives), len(actives), args.n))
    if markers:
        print("to marker: p50 %.2f s, max %.2f s (%d of %d)" % (pct(markers, 50), max(markers), len(markers), args.n))
    ms = lambda v: [round(x * 1000.0) for x in sorted(v)]
    fig.update({
        "cache": tag,
        "guests": args.n,
        "active_ms": {"p50": pct(actives, 50) * 1000 if actives else None,
                      "p99": pct(actives, 99) * 1000 if actives else None, "all": ms(actives)},
        "marker_ms": {"p50": pct(markers, 50) * 1000 if markers else None,
                      "p99": pct(markers, 99) * 1000 if markers else None, "all": ms(markers)},
        "qemu_rss_mib": qemu,
        "qemu_rss_mib_per_guest": sum(qemu) / len(qemu) if qemu else None,
        "overhead_mib_per_guest": sum(qemu) / len(qemu) - args.ram_mb if qemu else None,
        "failures": failures,
        "loadavg": open("/proc/loadavg").read().split()[:3],
    })
    return fig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--compute-path", default="/compute/v2.1",
                    help="the compute API's path under --url (berth: /compute/v2.1; Nova: '')")
    ap.add_argument("--image", required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--flavor")
    ap.add_argument("--ram-mb", type=int, default=128)
    ap.add_argument("--rounds", default="", help="comma-separated round names, e.g. cold,warm (default: one round)")
    ap.add_argument("--agent-pid", type=int, help="the compute agent's process (nova-compute) to measure")
    ap.add_argument("--helper-match", help="command-line substring of the agent's detached helpers "
                    "(e.g. Nova's privsep-helper), counted in agent_cpu_ms_per_guest_with_children and agent_helpers_rss_mib")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    args = ap.parse_args()
    base = args.url.rstrip("/") + args.compute_path
    flavor = args.flavor
    if not flavor:
        flavor = "guest-bench"
        call(base, "POST", "/flavors", {"flavor": {"name": flavor, "id": flavor, "ram": args.ram_mb, "vcpus": 1, "disk": 1}})
    rounds = []
    for tag in (args.rounds.split(",") if args.rounds else [""]):
        if tag:
            print("round %s (load %s)" % (tag, " ".join(open("/proc/loadavg").read().split()[:3])))
        rounds.append(boot_round(base, args, flavor, tag))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "guests", "guests": args.n, "ram_mb": args.ram_mb, "rounds": rounds}, f, indent=2)


if __name__ == "__main__":
    main()
