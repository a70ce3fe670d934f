#!/usr/bin/env python3
"""Populate a Placement through its own API (issue 40's import figures).

    populate.py URL [--roots 3000] [--pf-every 3] [--shared 20] [--consumers 50000] [--threads 16]
                [--consumer-threads 1] [--batch 100] [--skip-providers]

Trees: ROOTS compute roots `cn-I`, each with two NUMA children (VCPU, MEMORY_MB), and
under numa0 of every PF_EVERY-th root a PF grandchild (CUSTOM_FPGA); SHARED sharing
providers (DISK_GB, MISC_SHARES_VIA_AGGREGATE), root I in aggregate I % SHARED with
sharing provider I % SHARED. Custom classes CUSTOM_FPGA, CUSTOM_GOLD, custom traits
CUSTOM_FAST, CUSTOM_RACK_A. CONSUMERS consumers, each VCPU + MEMORY_MB on both NUMA nodes of root
I = C % ROOTS (every tenth also DISK_GB on its root's sharing provider, every seventh
a PF's CUSTOM_FPGA where the root has one: four to six allocation rows each), written 100 at a time (POST /allocations) at microversion 1.38 with a
consumer type (INSTANCE, every tenth MIGRATION); every fifth is written a second time
(consumer generation 2). Standard library only; a fresh connection per request (uWSGI's
--http-socket drops reused ones). Prints counts and the time taken.

Consumers are written by one thread by default: every batch touches the sharing providers, so two
batches at once conflict on their generations, and upstream retries the whole batch (10 times, then
a 409 that this script retries again): with two threads the real Placement wrote 3 consumers a second
instead of the one thread's 15-17. A batch already written (its first consumer at generation 1, or 2
after the second write) is skipped, so a stopped run can be taken up again (--skip-providers when the
providers are all there).
"""
import argparse
import concurrent.futures
import http.client
import json
import random
import sys
import time
import urllib.parse
import uuid

NS = uuid.UUID("6ba7b812-9dad-11d1-80b4-00c04fd430c8")


def uid(kind, i):
    return str(uuid.uuid5(NS, f"{kind}-{i}"))


class Api:
    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.prefix = parts.hostname, parts.port or 80, parts.path.rstrip("/")

    def call(self, method, path, body=None, version="1.39", ok=(200, 201, 204)):
        for attempt in range(60):
            conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
            headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": f"placement {version}",
                       "Accept": "application/json", "Connection": "close"}
            data = None
            if body is not None:
                data = json.dumps(body)
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, self.prefix + path, data, headers)
                resp = conn.getresponse()
                text = resp.read()
            except (OSError, http.client.HTTPException):
                time.sleep(0.2 * (attempt + 1))
                continue
            finally:
                conn.close()
            if resp.status in ok:
                return json.loads(text) if text else None
            if resp.status in (409, 500, 502, 503) and attempt < 59:
                time.sleep(random.uniform(0.01, 0.05 * min(attempt + 1, 10)))
                continue
            raise RuntimeError(f"{method} {path}: {resp.status} {text[:300]!r}")
        raise RuntimeError(f"{method} {path}: no answer")


def parallel(threads, fn, items):
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(fn, items):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--roots", type=int, default=3000)
    ap.add_argument("--pf-every", type=int, default=3)
    ap.add_argument("--shared", type=int, default=20)
    ap.add_argument("--consumers", type=int, default=50000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--consumer-threads", type=int, default=1)
    ap.add_argument("--skip-providers", action="store_true", help="the providers are there: write consumers only")
    ap.add_argument("--batch", type=int, default=100, help="consumers per POST /allocations")
    a = ap.parse_args()
    api = Api(a.url)
    t0 = time.time()
    for rc in ("CUSTOM_FPGA", "CUSTOM_GOLD"):
        api.call("PUT", f"/resource_classes/{rc}", version="1.7")
    for tr in ("CUSTOM_FAST", "CUSTOM_RACK_A"):
        api.call("PUT", f"/traits/{tr}")

    def provider(name, puuid, parent, inventories, traits, aggregates):
        api.call("POST", "/resource_providers", {"name": name, "uuid": puuid, "parent_provider_uuid": parent})
        gen = 0
        if inventories:
            gen = api.call("PUT", f"/resource_providers/{puuid}/inventories",
                           {"resource_provider_generation": gen, "inventories": inventories})["resource_provider_generation"]
        if traits:
            gen = api.call("PUT", f"/resource_providers/{puuid}/traits",
                           {"resource_provider_generation": gen, "traits": traits})["resource_provider_generation"]
        if aggregates:
            api.call("PUT", f"/resource_providers/{puuid}/aggregates",
                     {"resource_provider_generation": gen, "aggregates": aggregates})

    def agg(i):
        return uid("agg", i % a.shared)

    def shared(i):
        provider(f"shared-disk-{i}", uid("shared", i), None,
                 {"DISK_GB": {"total": 1000000, "reserved": 100, "max_unit": 2000, "step_size": 1}},
                 ["MISC_SHARES_VIA_AGGREGATE"], [agg(i)])

    def root(i):
        traits = ["HW_CPU_X86_AVX2"] + (["CUSTOM_FAST"] if i % 4 == 0 else [])
        inv = {"CUSTOM_GOLD": {"total": 8}} if i % 10 == 0 else {}
        provider(f"cn-{i}", uid("cn", i), None, inv, traits, [agg(i)])

    def numa(k):
        i, n = divmod(k, 2)
        ratio = 4.0 if i % 2 == 0 else 1.0
        provider(f"cn-{i}-numa{n}", uid("numa", k), uid("cn", i),
                 {"VCPU": {"total": 32, "allocation_ratio": ratio, "max_unit": 32},
                  "MEMORY_MB": {"total": 65536, "reserved": 512, "allocation_ratio": 1.5, "max_unit": 65536}},
                 ["CUSTOM_RACK_A"] if n == 1 else [], [])

    def pf(i):
        provider(f"cn-{i}-numa0-pf0", uid("pf", i), uid("numa", 2 * i),
                 {"CUSTOM_FPGA": {"total": 4, "max_unit": 1}}, [], [])

    if not a.skip_providers:
        parallel(a.threads, shared, range(a.shared))
        parallel(a.threads, root, range(a.roots))
        parallel(a.threads, numa, range(2 * a.roots))
        parallel(a.threads, pf, range(0, a.roots, a.pf_every))
    n_providers = a.shared + 3 * a.roots + len(range(0, a.roots, a.pf_every))
    t1 = time.time()
    print(f"providers: {n_providers} in {t1 - t0:.0f} s", flush=True)

    def consumer(c, generation):
        i = c % a.roots
        memory = 512 * (1 + c % 3 + generation)
        allocations = {uid("numa", 2 * i): {"resources": {"VCPU": 1, "MEMORY_MB": memory}},
                       uid("numa", 2 * i + 1): {"resources": {"VCPU": 1 + c % 2, "MEMORY_MB": memory}}}
        if c % 10 == 3:
            allocations[uid("shared", i % a.shared)] = {"resources": {"DISK_GB": 10}}
        if c % 7 == 0 and i % a.pf_every == 0:
            allocations[uid("pf", i)] = {"resources": {"CUSTOM_FPGA": 1}}
        return {"allocations": allocations, "project_id": f"project-{c % 50}", "user_id": f"user-{c % 200}",
                "consumer_generation": generation or None,
                "consumer_type": "MIGRATION" if c % 10 == 0 else "INSTANCE"}

    # POST /allocations (1.13+) writes many consumers in one request.
    def consume(start):
        batch = range(start, min(start + a.batch, a.consumers))

        def generation(c):
            return api.call("GET", f"/allocations/{uid('consumer', c)}", version="1.38").get("consumer_generation")

        # What a stopped run left: a batch is written in one transaction, so its first
        # consumer tells; a consumer written twice is at generation 2.
        if not generation(start):
            api.call("POST", "/allocations", {uid("consumer", c): consumer(c, 0) for c in batch}, version="1.38")
        again = [c for c in batch if c % 5 == 0]
        if again and generation(again[0]) == 1:
            api.call("POST", "/allocations", {uid("consumer", c): consumer(c, 1) for c in again}, version="1.38")

    parallel(a.consumer_threads, consume, range(0, a.consumers, a.batch))
    t2 = time.time()
    n_rows = sum(sum(len(r["resources"]) for r in consumer(c, 0)["allocations"].values()) for c in range(a.consumers))
    print(f"consumers: {a.consumers} ({n_rows} allocation rows) in {t2 - t1:.0f} s", flush=True)
    print(f"populated in {t2 - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
