#!/usr/bin/env python3
"""Boot N real guests on a berth with a `--driver libvirt` agent and time
them: request -> ACTIVE and request -> the guest's marker line
(`BERTH-GUEST-UP`, read through os-getConsoleOutput), then delete them.

    scripts/guest-bench.py --url http://127.0.0.1:8778 --image IMAGE_ID [--n 4] [--flavor ID]

The image is the one scripts/guest-image.sh uploads. Prints one line per
guest and p50/max of both times. Standard library only.
"""
import argparse
import json
import threading
import time
import urllib.request


def call(base, method, path, body=None, token="admin"):
    req = urllib.request.Request(base + "/compute/v2.1" + path, method=method)
    req.add_header("X-Auth-Token", token)
    req.add_header("OpenStack-API-Version", "compute 2.79")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, data, timeout=60) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as err:
        return err.code, None


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--flavor")
    args = ap.parse_args()
    base = args.url.rstrip("/")
    flavor = args.flavor
    if not flavor:
        flavor = "guest-bench"
        call(base, "POST", "/flavors", {"flavor": {"name": flavor, "id": flavor, "ram": 128, "vcpus": 1, "disk": 1}})
    results = {}

    def one(i):
        start = time.monotonic()
        status, body = call(base, "POST", "/servers", {"server": {
            "name": "bench-%d" % i, "flavorRef": flavor, "imageRef": args.image, "networks": "none"}})
        if status != 202:
            results[i] = ("boot answered %s" % status, None, None)
            return
        sid = body["server"]["id"]
        active = marker = None
        deadline = start + 300
        while time.monotonic() < deadline and marker is None:
            if active is None:
                _, shown = call(base, "GET", "/servers/" + sid)
                state = shown["server"]["status"] if shown else "?"
                if state == "ERROR":
                    break
                if state == "ACTIVE":
                    active = time.monotonic() - start
            if active is not None:
                _, out = call(base, "POST", "/servers/%s/action" % sid, {"os-getConsoleOutput": {}})
                if out and "BERTH-GUEST-UP uuid=" + sid in (out.get("output") or ""):
                    marker = time.monotonic() - start
            time.sleep(0.1)
        results[i] = (sid, active, marker)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    actives, markers = [], []
    for i in range(args.n):
        sid, active, marker = results[i]
        print("guest %d %s: ACTIVE %s s, marker %s s" % (
            i, sid, "%.2f" % active if active else "-", "%.2f" % marker if marker else "-"))
        if active:
            actives.append(active)
        if marker:
            markers.append(marker)
        if sid and len(sid) == 36:
            call(base, "DELETE", "/servers/" + sid)
    if actives:
        print("to ACTIVE: p50 %.2f s, max %.2f s (%d of %d)" % (pct(actives, 50), max(actives), len(actives), args.n))
    if markers:
        print("to marker: p50 %.2f s, max %.2f s (%d of %d)" % (pct(markers, 50), max(markers), len(markers), args.n))


if __name__ == "__main__":
    main()
