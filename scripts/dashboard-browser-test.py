#!/usr/bin/env python3
"""Drives berth's operator dashboard (/dashboard) in a real headless Chromium.

Starts `berth serve --fake-hosts 4 --pool-lend-lead 3600` on a free port,
creates flavors (two with extra specs), servers (two projects), enrols two
hosts in the reservation pool (lent to general scheduling while no lease
needs them), an aggregate and leases through the APIs, then checks in the
browser (Playwright driving Debian's /usr/bin/chromium) that every view
loads with no console error and that the numbers it shows equal the APIs':
host count, used VCPU of a host (heatmap and host detail), pool state and
power of the pool hosts, free count of each flavor now (from placement) and
at a future time (= the endpoint's, and fewer than now once a lease starts
in between), per aggregate, a lease bar's position and length, the
calendar's aggregate filter, the earliest-slot finder's answer (= GET
/reservation/v1/availability), the activity figures (time to ACTIVE,
scheduler and claim latency = the endpoint's), and that a non-admin
(noauth2 token `user2:proj2`) sees only its project.

    scripts/dashboard-browser-test.py BERTH_BIN [--screenshots DIR]
    scripts/dashboard-browser-test.py --measure URL [--screenshots DIR]

`--measure URL` (a berth already populated, e.g. by `berth bench dashboard
--keep`): opens each view as admin, prints its first render time (from
navigation to the view drawn, and the script's own time after the page
loaded), fails on a console error, and takes the screenshots.

Exit status 0 when every check passed; prints one `ok:` line per check.
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Api:
    def __init__(self, base, token="admin"):
        self.base = base
        self.token = token

    def call(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("X-Auth-Token", self.token)
        req.add_header("Accept", "application/json")
        req.add_header("OpenStack-API-Version", "compute 2.37")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, raw.decode(errors="replace")

    def get(self, path):
        status, body = self.call("GET", path)
        check(status == 200, f"GET {path} answered {status}: {body}")
        return body

    def post(self, path, body, want=(200, 201, 202)):
        status, answer = self.call("POST", path, body)
        check(status in want, f"POST {path} answered {status}: {answer}")
        return answer


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        raise SystemExit(1)


def ok(what):
    print(f"ok: {what}", flush=True)


def parse_blazar_date(text):
    text = text.replace("T", " ").rstrip("Z")
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            dt = datetime.datetime.strptime(text, fmt)
            return int(dt.replace(tzinfo=datetime.timezone.utc).timestamp())
        except ValueError:
            pass
    raise ValueError(text)


def blazar_date(sec):
    return datetime.datetime.fromtimestamp(sec, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


def setup(admin, base):
    """Flavors, servers in two projects, a pool of two hosts, leases."""
    deadline = time.time() + 30
    while True:
        hyps = admin.get("/compute/v2.1/os-hypervisors")["hypervisors"]
        if len(hyps) == 4:
            break
        check(time.time() < deadline, f"4 hypervisors never reported (have {len(hyps)})")
        time.sleep(0.1)
    admin.post("/compute/v2.1/flavors", {"flavor": {"name": "small", "vcpus": 2, "ram": 1024, "disk": 10}})
    admin.post("/compute/v2.1/flavors", {"flavor": {"name": "large", "vcpus": 8, "ram": 4096, "disk": 40}})
    # Extra specs that constrain placement: a custom resource no host has,
    # and a trait every fake host has, forbidden.
    admin.post("/compute/v2.1/flavors", {"flavor": {"name": "gpu", "vcpus": 1, "ram": 512, "disk": 1}})
    admin.post("/compute/v2.1/flavors", {"flavor": {"name": "nonode", "vcpus": 1, "ram": 512, "disk": 1}})
    flavors = {f["name"]: f["id"] for f in admin.get("/compute/v2.1/flavors")["flavors"]}
    admin.post(f"/compute/v2.1/flavors/{flavors['gpu']}/os-extra_specs", {"extra_specs": {"resources:CUSTOM_GPU": "1"}})
    admin.post(f"/compute/v2.1/flavors/{flavors['nonode']}/os-extra_specs",
               {"extra_specs": {"trait:COMPUTE_NODE": "forbidden"}})
    image = admin.post("/image/v2/images", {"name": "cirros", "disk_format": "qcow2",
                                             "container_format": "bare", "visibility": "public"})["id"]
    # A new image is queued until its data arrives; a boot needs it active.
    upload = urllib.request.Request(f"{admin.base}/image/v2/images/{image}/file", data=b"cirros" * 1024, method="PUT")
    upload.add_header("X-Auth-Token", admin.token)
    upload.add_header("Content-Type", "application/octet-stream")
    with urllib.request.urlopen(upload, timeout=30) as resp:
        check(resp.status == 204, f"image upload answered {resp.status}")
    # The pool: fake-2 and fake-3 (no servers yet, as Blazar requires).
    pool = {}
    for name in ("fake-2", "fake-3"):
        pool[name] = admin.post("/reservation/v1/os-hosts", {"name": name})["host"]["id"]
    # Lending is on: keep the servers off the pool while they boot.
    services = {}
    for name in ("fake-2", "fake-3"):
        svc = admin.call("GET", f"/compute/v2.1/os-services?host={name}&binary=nova-compute",
                         headers={"OpenStack-API-Version": "compute 2.53"})[1]["services"][0]
        services[name] = svc["id"]
        status, body = admin.call("PUT", f"/compute/v2.1/os-services/{svc['id']}", {"status": "disabled"},
                                  headers={"OpenStack-API-Version": "compute 2.53"})
        check(status == 200, f"disable {name}: {status} {body}")
    user2 = Api(base, "user2:proj2")
    servers = []
    for i, (client, flavor) in enumerate([(admin, "small"), (admin, "small"), (admin, "large"), (user2, "small")]):
        body = {"server": {"name": f"vm{i}", "flavorRef": flavors[flavor], "imageRef": image, "networks": "none"}}
        servers.append((client, client.post("/compute/v2.1/servers", body)["server"]["id"]))
    for client, sid in servers:
        deadline = time.time() + 30
        while True:
            status = client.get(f"/compute/v2.1/servers/{sid}")["server"]["status"]
            if status == "ACTIVE":
                break
            check(status != "ERROR" and time.time() < deadline, f"server {sid} is {status}")
            time.sleep(0.1)
    for name, sid in services.items():
        status, body = admin.call("PUT", f"/compute/v2.1/os-services/{sid}", {"status": "enabled"},
                                  headers={"OpenStack-API-Version": "compute 2.53"})
        check(status == 200, f"enable {name}: {status} {body}")
    # An aggregate (and zone) over a host outside the pool and one in it.
    agg = admin.post("/compute/v2.1/os-aggregates", {"aggregate": {"name": "agg1", "availability_zone": "az1"}})
    for name in ("fake-0", "fake-2"):
        admin.post(f"/compute/v2.1/os-aggregates/{agg['aggregate']['id']}/action", {"add_host": {"host": name}})
    now = admin.get("/dashboard/api/session")["now"]
    hour = 3600
    start = now - now % 60
    lease_admin = admin.post("/reservation/v1/leases", {
        "name": "admin-lease", "start_date": blazar_date(start + 2 * hour), "end_date": blazar_date(start + 26 * hour),
        "events": [], "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1,
                                        "hypervisor_properties": "", "resource_properties": ""}]})["lease"]
    lease_user2 = user2.post("/reservation/v1/leases", {
        "name": "proj2-lease", "start_date": blazar_date(start + 30 * hour), "end_date": blazar_date(start + 78 * hour),
        "events": [], "reservations": [{"resource_type": "virtual:instance", "amount": 2, "vcpus": 2,
                                        "memory_mb": 1024, "disk_gb": 10, "affinity": None,
                                        "resource_properties": ""}]})["lease"]
    ok("set up: 4 hosts (2 in the pool, lent), 4 flavors, 4 servers in 2 projects, an aggregate, 2 leases")
    return {"flavors": flavors, "pool": pool, "lease_admin": lease_admin, "lease_user2": lease_user2}


def host_room(admin, name):
    """A host's placement inventories, usages and traits."""
    uuid = admin.get(f"/resource_providers?name={name}")["resource_providers"][0]["uuid"]
    inv = admin.get(f"/resource_providers/{uuid}/inventories")["inventories"]
    use = admin.get(f"/resource_providers/{uuid}/usages")["usages"]
    status, body = admin.call("GET", f"/resource_providers/{uuid}/traits",
                              headers={"OpenStack-API-Version": "placement 1.6"})
    check(status == 200, f"traits of {name}: {status} {body}")
    traits = set(body["traits"])
    return inv, use, traits


def fits(room, flavor, specs):
    """How many more of `flavor` (with its extra specs) fit in `room`."""
    inv, use, traits = room
    need = {"VCPU": flavor["vcpus"], "MEMORY_MB": flavor["ram"], "DISK_GB": flavor["disk"]}
    for key, value in specs.items():
        if key.startswith("resources:"):
            need[key.split(":", 1)[1]] = int(value)
        elif key.startswith("trait:"):
            has = key.split(":", 1)[1] in traits
            if has != (value == "required"):
                return 0
    n = None
    for cls, amount in need.items():
        if amount <= 0:
            continue
        if cls not in inv:
            return 0
        i = inv[cls]
        cap = int((i["total"] - i["reserved"]) * i["allocation_ratio"])
        fit = max(0, cap - use.get(cls, 0)) // amount if amount <= i["max_unit"] else 0
        n = fit if n is None else min(n, fit)
    return n or 0


def expected_free(admin, flavor):
    """How many more of `flavor` fit now, from the placement and
    reservation APIs alone: hosts outside the pool, and pool hosts lent."""
    specs = admin.get(f"/compute/v2.1/flavors/{flavor['id']}/os-extra_specs")["extra_specs"]
    pool = {h["hypervisor_hostname"]: h for h in admin.get("/reservation/v1/os-hosts")["hosts"]}
    total = 0
    for hyp in admin.get("/compute/v2.1/os-hypervisors")["hypervisors"]:
        name = hyp["hypervisor_hostname"]
        if name in pool and pool[name]["pool_state"] != "lent":
            continue
        total += fits(host_room(admin, name), flavor, specs)
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("berth", nargs="?")
    parser.add_argument("--measure", metavar="URL", help="time each view of an already running berth")
    parser.add_argument("--screenshots", help="write a PNG of each view into this directory")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure.rstrip("/"), args.screenshots)
        return
    check(args.berth, "give the berth binary (or --measure URL)")

    workdir = tempfile.mkdtemp(prefix="berth-dashboard.")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([args.berth, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir",
                             os.path.join(workdir, "data"), "--fake-hosts", "4", "--pool-lend-lead", "3600",
                             "--log", "warn"])
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/healthcheck", timeout=1)
                break
            except OSError:
                check(proc.poll() is None and time.time() < deadline, "berth did not start")
                time.sleep(0.05)
        admin = Api(base)
        made = setup(admin, base)
        run_browser(base, admin, made, args.screenshots)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    print("dashboard browser test: all checks passed")


def measure(base, screenshots):
    """First render of each view at whatever scale `base` holds."""
    errors = []
    worst = 0.0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        for name in ("capacity", "flavors", "calendar", "projects", "activity"):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            t0 = time.monotonic()
            page.goto(f"{base}/dashboard/#{name}")
            page.wait_for_selector(f'#view[data-view="{name}"][data-ready="true"]', timeout=60000)
            total = (time.monotonic() - t0) * 1000
            worst = max(worst, total)
            check(not errors, f"{name}: console errors: {errors}")
            print(f"view {name:<9} first render {total:8.0f} ms (script after load: {page.get_attribute('#view', 'data-render-ms')} ms)")
            if screenshots:
                os.makedirs(screenshots, exist_ok=True)
                page.screenshot(path=os.path.join(screenshots, f"{name}.png"))
            page.close()
        browser.close()
    print(f"worst first render {worst:.0f} ms")


def run_browser(base, admin, made, screenshots):
    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))

        def open_view(name):
            page.goto(f"{base}/dashboard/#{name}")
            page.wait_for_selector(f'#view[data-view="{name}"][data-ready="true"]', timeout=15000)
            check(not errors, f"{name}: console errors: {errors}")
            ms = page.get_attribute("#view", "data-render-ms")
            if screenshots:
                os.makedirs(screenshots, exist_ok=True)
                page.screenshot(path=os.path.join(screenshots, f"{name}.png"), full_page=True)
            return ms

        # Capacity: host count and one host's used VCPU, in the heatmap and
        # in the host detail a click opens.
        ms = open_view("capacity")
        hyps = admin.get("/compute/v2.1/os-hypervisors/detail")["hypervisors"]
        shown = int(page.inner_text("#host-count"))
        check(shown == len(hyps), f"host count: page {shown}, API {len(hyps)}")
        ok(f"capacity view ({ms} ms): host count {shown} = os-hypervisors")
        busiest = None
        for name in ("fake-0", "fake-1"):
            uuid = admin.get(f"/resource_providers?name={name}")["resource_providers"][0]["uuid"]
            used = admin.get(f"/resource_providers/{uuid}/usages")["usages"].get("VCPU", 0)
            if busiest is None or used > busiest[2]:
                busiest = (name, uuid, used)
        name, uuid, used = busiest
        check(used > 0, "a server landed on fake-0 or fake-1")
        cell = page.locator(f'.cell[data-host="{name}"]')
        check(int(cell.get_attribute("data-used")) == used, f"heatmap {name} VCPU used != placement's {used}")
        cell.click()
        page.wait_for_selector(f'#host-detail[data-uuid="{uuid}"]')
        detail_used = int(page.inner_text('#host-detail tr[data-class="VCPU"] td.used'))
        check(detail_used == used, f"host detail VCPU used {detail_used} != placement's {used}")
        check(page.locator("#host-allocations tr").count() - 1 == len(
            admin.get(f"/resource_providers/{uuid}/allocations")["allocations"]), "host detail allocations = placement's")
        ok(f"capacity: {name} VCPU used {used} (heatmap and host detail) = placement usages; allocations listed")
        # Pool lending and power, in the heatmap and the host detail.
        pool_hosts = {h["hypervisor_hostname"]: h for h in admin.get("/reservation/v1/os-hosts")["hosts"]}
        for pname, ph in sorted(pool_hosts.items()):
            cell = page.locator(f'.cell[data-host="{pname}"]')
            got = (cell.get_attribute("data-pool-state"), cell.get_attribute("data-power"))
            check(got == (ph["pool_state"], ph["power_state"]), f"heatmap {pname} pool/power {got}, os-hosts {ph}")
            check(("lent" in cell.get_attribute("class").split()) == (ph["pool_state"] == "lent"), f"{pname} lent mark")
        check(all(h["pool_state"] == "lent" for h in pool_hosts.values()), f"both pool hosts lent now: {pool_hosts}")
        pname = sorted(pool_hosts)[0]
        pcell = page.locator(f'.cell[data-host="{pname}"]')
        puuid = pcell.get_attribute("data-uuid")
        pcell.click()
        page.wait_for_selector(f'#host-detail[data-uuid="{puuid}"]')
        got = (page.inner_text("#host-pool-state"), page.inner_text("#host-power"))
        check(got == (pool_hosts[pname]["pool_state"], pool_hosts[pname]["power_state"]), f"host detail pool/power {got}")
        ok(f"capacity: pool hosts marked {[(n, h['pool_state'], h['power_state']) for n, h in sorted(pool_hosts.items())]}"
           " = os-hosts (heatmap and host detail)")

        # Free capacity by flavor: now (= placement), per aggregate, and
        # at a future time (= the endpoint's; a lease starts in between).
        ms = open_view("flavors")
        free, pool_free, flavor_of = {}, {}, {}
        for fname in ("small", "large", "gpu", "nonode"):
            flavor_of[fname] = admin.get(f"/compute/v2.1/flavors/{made['flavors'][fname]}")["flavor"]
            want = expected_free(admin, flavor_of[fname])
            free[fname] = int(page.inner_text(f'tr[data-flavor="{fname}"] td.free'))
            pool_free[fname] = int(page.inner_text(f'tr[data-flavor="{fname}"] td.pool-free'))
            check(free[fname] == want, f"free {fname}: page {free[fname]}, from placement {want}")
        check(free["small"] > 0 and free["gpu"] == 0 and free["nonode"] == 0, f"extra specs respected: {free}")
        ok(f"flavors view ({ms} ms): fit now {free} = computed from placement inventories/usages/traits and lent pool hosts")
        metrics = urllib.request.urlopen(base + "/metrics").read().decode().splitlines()
        for fname, n in free.items():
            line = f'berth_free_capacity_by_flavor_total{{flavor="{fname}"}} {n}'
            check(line in metrics, f"/metrics lacks {line!r}")
        ok("/metrics: berth_free_capacity_by_flavor_total{flavor=...} = the view's counts")
        rooms = {n: host_room(admin, n) for n in ("fake-0", "fake-1", "fake-2", "fake-3")}
        page.select_option("#flavors-group", "aggregate")
        page.wait_for_selector('#view[data-ready="true"] tr[data-flavor="small"] td[data-group="agg1"]')
        in_agg = int(page.inner_text('tr[data-flavor="small"] td[data-group="agg1"]'))
        want = fits(rooms["fake-0"], flavor_of["small"], {}) + fits(rooms["fake-2"], flavor_of["small"], {})
        check(in_agg == want, f"small in agg1: page {in_agg}, placement {want}")
        line = f'berth_free_capacity_by_flavor_and_aggregate_total{{flavor="small",aggregate="agg1"}} {in_agg}'
        check(line in metrics, f"/metrics lacks {line!r}")
        ok(f"flavors per aggregate: small fits {in_agg} in agg1 = placement; /metrics gauge per aggregate")
        at_now = page.get_attribute("#flavor-table", "data-at")
        page.select_option("#flavors-ahead", "3")
        page.wait_for_function("(a) => { const t = document.querySelector('#flavor-table');"
                               " return t && t.dataset.at !== a && document.querySelector('#view').dataset.ready === 'true'; }",
                               arg=at_now)
        check(not errors, f"flavors at a future time: console errors: {errors}")
        at = int(page.get_attribute("#flavor-table", "data-at"))
        later = {f["flavor"]: f for f in admin.get(f"/dashboard/api/flavors?at={at}")["flavors"]}
        allocs = admin.get("/reservation/v1/os-hosts/allocations")["allocations"]
        by_id = {h["id"]: n for n, h in pool_hosts.items()}
        held = [by_id[a["resource_id"]] for a in allocs
                if any(r["lease_id"] == made["lease_admin"]["id"] for r in a["reservations"])]
        check(len(held) == 1, f"the admin lease holds one host: {held}")
        for fname in ("small", "large"):
            shown = int(page.inner_text(f'tr[data-flavor="{fname}"] td.free'))
            shown_pool = int(page.inner_text(f'tr[data-flavor="{fname}"] td.pool-free'))
            check((shown, shown_pool) == (later[fname]["free"], later[fname]["pool_free"]),
                  f"{fname} at {at}: page {shown}/{shown_pool}, endpoint {later[fname]['free']}/{later[fname]['pool_free']}")
            taken = fits(rooms[held[0]], flavor_of[fname], {})
            check(taken > 0 and shown == free[fname] - taken and shown_pool == pool_free[fname] - taken,
                  f"{fname}: at +3 h {shown}/{shown_pool}, now {free[fname]}/{pool_free[fname]}, the leased host fits {taken}")
        ok(f"flavors in 3 hours: small {later['small']['free']} (pool {later['small']['pool_free']}) = the endpoint's,"
           f" now {free['small']} (pool {pool_free['small']}): the lease starting in 2 h takes {held[0]}")
        page.select_option("#flavors-ahead", "0")
        page.wait_for_selector(f'#view[data-ready="true"] #flavor-table[data-at]')

        # Lease calendar: the admin lease's bar where its dates say.
        ms = open_view("calendar")
        lease = admin.get(f"/reservation/v1/leases/{made['lease_admin']['id']}")["lease"]
        start, end = parse_blazar_date(lease["start_date"]), parse_blazar_date(lease["end_date"])
        svg = page.locator("#gantt-svg")
        s0, s1 = int(svg.get_attribute("data-start")), int(svg.get_attribute("data-end"))
        x0, width = float(svg.get_attribute("data-x0")), float(svg.get_attribute("data-width"))
        bar = page.locator(f'rect.gantt-bar[data-lease="{lease["id"]}"]')
        check(bar.count() == 1, f"one bar for the admin lease (found {bar.count()})")
        want_x = x0 + (max(start, s0) - s0) * width / (s1 - s0)
        want_w = (min(end, s1) - max(start, s0)) * width / (s1 - s0)
        got_x, got_w = float(bar.get_attribute("x")), float(bar.get_attribute("width"))
        check(abs(got_x - want_x) < 0.5 and abs(got_w - want_w) < 0.5,
              f"bar at x={got_x} w={got_w}, dates say x={want_x:.1f} w={want_w:.1f}")
        host_id = bar.get_attribute("data-host")
        allocs = admin.get("/reservation/v1/os-hosts/allocations")["allocations"]
        held = {a["resource_id"] for a in allocs if any(r["lease_id"] == lease["id"] for r in a["reservations"])}
        check(host_id in held, f"bar on host {host_id}, the lease holds {held}")
        check(page.locator("#now-line").count() == 1, "now line drawn")
        ok(f"calendar view ({ms} ms): lease bar x={got_x:.1f} w={got_w:.1f} on host {host_id} = lease dates and allocation")
        # Lent hosts and power on the calendar; the aggregate filter.
        lent = {h["id"] for h in admin.get("/reservation/v1/os-hosts")["hosts"] if h["pool_state"] == "lent"}
        bands = {page.locator("rect.lent-band").nth(i).get_attribute("data-host") for i in range(page.locator("rect.lent-band").count())}
        check(bands == lent, f"lent bands on {bands}, os-hosts lent {lent}")
        for hid in lent:
            check(page.get_attribute(f'svg text[data-row="{hid}"]', "data-power") == "on", f"host {hid} power on")
        page.select_option("#calendar-aggregate", "agg1")
        rows = {page.locator("svg text[data-row]").nth(i).get_attribute("data-row") for i in range(page.locator("svg text[data-row]").count())}
        check(rows == {pool_hosts["fake-2"]["id"]}, f"aggregate filter agg1 shows {rows}")
        page.select_option("#calendar-aggregate", "")
        page.select_option("#calendar-trait", label="COMPUTE_NODE")
        rows = page.locator("svg text[data-row]").count()
        check(rows == len(pool_hosts), f"trait filter COMPUTE_NODE shows {rows} rows")
        page.select_option("#calendar-trait", "")
        ok(f"calendar: lent bands on {sorted(lent)}; filter by aggregate agg1 -> fake-2 only, by trait COMPUTE_NODE -> all")

        # Earliest-slot finder = GET /reservation/v1/availability.
        page.select_option("#finder-type", "physical:host")
        page.fill("#finder-hours", "24")
        page.fill("#finder-count", "2")
        page.click('#finder button[type="submit"]')
        page.wait_for_selector("#finder-result[data-start]")
        want = admin.get("/reservation/v1/availability?resource_type=physical:host&duration=86400&min=2&max=2")["availability"]
        got_start = page.get_attribute("#finder-result", "data-start")
        check(got_start == want["start_date"], f"finder start {got_start}, availability API {want['start_date']}")
        check(page.get_attribute("#finder-result", "data-hosts") == ",".join(a["resource_id"] for a in want["allocations"]),
              "finder hosts = availability API's")
        check(page.locator("rect.slot").count() == len(want["allocations"]), "slot drawn on each host")
        ok(f"earliest-slot finder: {got_start} on {len(want['allocations'])} hosts = GET /availability")
        for zoom in ("day", "month"):
            page.click(f"#zoom-{zoom}")
            page.wait_for_selector(f'#view[data-ready="true"] #zoom-{zoom}[disabled]')
        check(not errors, f"zoom: console errors: {errors}")
        ok("calendar zoom day/month")

        ms = open_view("projects")
        rows = page.locator("#project-table tr[data-project]")
        projects = {rows.nth(i).get_attribute("data-project") for i in range(rows.count())}
        check({"admin", "proj2"} <= projects, f"admin sees both projects: {projects}")
        used = int(page.get_attribute('tr[data-project="proj2"] td[data-resource="instances"]', "data-used"))
        check(used == 1, f"proj2 instances used {used}")
        ok(f"projects view ({ms} ms): admin sees {sorted(projects)}; proj2 uses 1 instance")

        ms = open_view("activity")
        act = admin.get("/dashboard/api/activity")["timings"]
        for key, name in (("tta", "time_to_active"), ("sched", "scheduler"), ("claim", "claim")):
            for q in ("p50", "p99"):
                shown = float(page.get_attribute(f"#{key}-{q}", "data-value"))
                check(shown == act[name][q] and act[name][q] > 0, f"{name} {q}: page {shown}, endpoint {act[name][q]}")
        check(act["time_to_active"]["count"] >= 4 and act["scheduler"]["count"] >= 1 and act["claim"]["count"] >= 1,
              f"timed: {act}")
        page.wait_for_function("document.querySelector('#boots-rate') && document.querySelector('#boots-rate').textContent.endsWith('/s')",
                               timeout=12000)
        ok(f"activity: time to ACTIVE p50/p99 {act['time_to_active']['p50']}/{act['time_to_active']['p99']} s, scheduler"
           f" {act['scheduler']['p50']}/{act['scheduler']['p99']} s, claim {act['claim']['p50']}/{act['claim']['p99']} s"
           f" = the endpoint's; boots/s after a live refresh: {page.inner_text('#boots-rate')}")
        check(int(page.inner_text("#errors-5xx")) == 0, "no 5xx answers so far")
        check(page.locator('#activity-counters tr[data-counter="berth_compute_boots_accepted_total"]').count() == 1,
              "boots counter shown")
        ok(f"activity view ({ms} ms): counters, latency, 0 5xx")

        # A non-admin: log in with user2:proj2's token.
        page.click("#logout")
        page.fill("#login-token", "user2:proj2")
        page.click('#login-form button[type="submit"]')
        page.wait_for_selector('#view[data-view="calendar"][data-ready="true"]')
        check(page.locator('#tabs a[data-view="capacity"]').is_hidden(), "capacity tab hidden for a non-admin")
        leases = {page.locator("rect.gantt-bar").nth(i).get_attribute("data-lease")
                  for i in range(page.locator("rect.gantt-bar").count())}
        check(leases == {made["lease_user2"]["id"]}, f"non-admin sees only its lease: {leases}")
        page.goto(f"{base}/dashboard/#projects")
        page.wait_for_selector('#view[data-view="projects"][data-ready="true"]')
        rows = page.locator("#project-table tr[data-project]")
        projects = {rows.nth(i).get_attribute("data-project") for i in range(rows.count())}
        check(projects == {"proj2"}, f"non-admin sees only its project: {projects}")
        status, _ = Api(base, "user2:proj2").call("GET", "/dashboard/api/capacity")
        check(status == 403, f"non-admin capacity API answered {status}")
        check(not errors, f"non-admin: console errors: {errors}")
        ok("non-admin user2:proj2 sees only its lease and project; capacity refused (403)")
        browser.close()


if __name__ == "__main__":
    main()
