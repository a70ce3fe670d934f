#!/usr/bin/env python3
"""The Nova side of scripts/nova-adoption.sh (berth adopted under a running Nova, issue 40).

  adoption.py before --state FILE [--small 5] [--big 3]
      on the old Placement: flavors adopt-small (1 VCPU) and adopt-big (2 VCPU), SMALL + BIG servers booted
      one after another until ACTIVE; their ids and allocations (as the old Placement answers) go to FILE.
  adoption.py after --state FILE --placement URL
      on berth after the switch: the earlier servers' allocations are as they were; the free VCPU of every
      compute node is read from berth (capacity = (total - reserved) x allocation_ratio, minus usage); then
      adopt-big servers are booted one at a time until the nodes are full: exactly sum(free // 2) become ACTIVE,
      the next is ERROR "No valid host"; then adopt-small ones: exactly the odd VCPU left, the next is ERROR;
      every node's VCPU usage is then its capacity (full, not over). Finally one earlier server is deleted:
      its allocation is gone from berth and its node's usage drops by its VCPU.

Nova at --compute (default http://127.0.0.1:18774/v2.1), token `admin` (noauth_shim). Exits non-zero on the
first check that fails.
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument('step', choices=['before', 'after'])
ap.add_argument('--state', required=True)
ap.add_argument('--compute', default='http://127.0.0.1:18774/v2.1')
ap.add_argument('--placement', default='http://127.0.0.1:18778')
ap.add_argument('--image', default='a3c6f1a2-0000-4000-8000-000000000001')
ap.add_argument('--small', type=int, default=5)
ap.add_argument('--big', type=int, default=3)
ap.add_argument('--timeout', type=float, default=180)
A = ap.parse_args()
PROJECT = 'adopt'


def call(base, method, path, body=None, version=None):
    headers = {'X-Auth-Token': 'admin' if PROJECT is None else f'admin:{PROJECT}', 'Content-Type': 'application/json'}
    if version:
        headers['OpenStack-API-Version'] = version
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as err:
        text = err.read()
        try:
            return err.code, json.loads(text)
        except ValueError:
            return err.code, text[:300]


def nova(method, path, body=None):
    return call(A.compute.rstrip('/'), method, path, body, 'compute 2.90')


def placement(method, path, body=None):
    return call(A.placement.rstrip('/'), method, path, body, 'placement 1.39')


def check(cond, what):
    if not cond:
        print(f'FAILED: {what}', flush=True)
        sys.exit(1)
    print(f'ok: {what}', flush=True)


def flavor_id(name):
    st, body = nova('GET', '/flavors')
    return next(f['id'] for f in body['flavors'] if f['name'] == name)


def boot(name, flavor):
    """Boot one server and wait until it is ACTIVE or ERROR: (id, status, host node, fault message)."""
    st, body = nova('POST', '/servers', {'server': {'name': name, 'flavorRef': flavor, 'imageRef': A.image,
                                                     'networks': 'none'}})
    assert st == 202, (st, body)
    sid = body['server']['id']
    t0 = time.time()
    while time.time() - t0 < A.timeout:
        st, body = nova('GET', f'/servers/{sid}')
        server = body['server']
        if server['status'] in ('ACTIVE', 'ERROR'):
            return (sid, server['status'], server.get('OS-EXT-SRV-ATTR:hypervisor_hostname'),
                    (server.get('fault') or {}).get('message'))
        time.sleep(0.5)
    return sid, 'unsettled', None, None


def nodes():
    """{provider uuid: (name, VCPU capacity, VCPU used)} of every provider with VCPU inventory, from Placement."""
    out = {}
    for rp in placement('GET', '/resource_providers')[1]['resource_providers']:
        inv = placement('GET', f"/resource_providers/{rp['uuid']}/inventories")[1]['inventories'].get('VCPU')
        if not inv:
            continue
        used = placement('GET', f"/resource_providers/{rp['uuid']}/usages")[1]['usages'].get('VCPU', 0)
        out[rp['uuid']] = (rp['name'], int((inv['total'] - inv['reserved']) * inv['allocation_ratio']), used)
    return out


def held(allocations):
    """A consumer's allocations without the providers' generations (those move whenever a compute updates its
    provider's traits or inventory, as a restarted nova-compute does): amounts per provider, consumer generation,
    project, user, consumer type."""
    out = dict(allocations)
    out['allocations'] = {rp: a['resources'] for rp, a in allocations.get('allocations', {}).items()}
    return out


def intact(servers):
    return [sid for sid, s in servers.items()
            if held(placement('GET', f'/allocations/{sid}')[1]) == held(s['allocations'])]


def show(label, table):
    print(f'{label}: ' + ', '.join(f'{n} {u}/{c}' for n, c, u in sorted(table.values())) + ' VCPU used/capacity',
          flush=True)


def before():
    global PROJECT
    PROJECT = None
    st, body = nova('PUT', '/os-quota-sets/adopt', {'quota_set': {'instances': -1, 'cores': -1, 'ram': -1}})
    assert st == 200, (st, body)
    for name, vcpus in (('adopt-small', 1), ('adopt-big', 2)):
        st, body = nova('POST', '/flavors', {'flavor': {'name': name, 'ram': 64, 'vcpus': vcpus, 'disk': 1}})
        assert st == 200, (st, body)
    PROJECT = 'adopt'
    servers = {}
    plan = [('adopt-small', f'pre-small-{i}') for i in range(A.small)] + \
           [('adopt-big', f'pre-big-{i}') for i in range(A.big)]
    for flavor, name in plan:
        sid, status, node, fault = boot(name, flavor_id(flavor))
        check(status == 'ACTIVE', f'{name} ({flavor}) ACTIVE on {node} under the old Placement')
        servers[sid] = {'name': name, 'node': node,
                        'allocations': placement('GET', f'/allocations/{sid}')[1]}
    show('old Placement before the switch', nodes())
    with open(A.state, 'w') as out:
        json.dump({'servers': servers}, out, indent=1)


def after():
    with open(A.state) as inp:
        state = json.load(inp)
    servers = state['servers']
    same = intact(servers)
    check(len(same) == len(servers),
          f"the {len(servers)} earlier servers' allocations in berth are those the old Placement had ({len(same)} equal)")
    table = nodes()
    show('berth after the switch', table)
    free = {rp: cap - used for rp, (_, cap, used) in table.items()}
    check(all(f >= 0 for f in free.values()), 'no node over capacity after the import')
    want_big = sum(f // 2 for f in free.values())
    want_small = sum(f % 2 for f in free.values())
    print(f'free VCPU per node {sorted(free.values())}: room for {want_big} adopt-big, then {want_small} adopt-small',
          flush=True)
    t0 = time.time()
    for flavor, want in (('adopt-big', want_big), ('adopt-small', want_small)):
        fid = flavor_id(flavor)
        active = 0
        for i in range(want):
            sid, status, node, fault = boot(f'post-{flavor}-{i}', fid)
            if status != 'ACTIVE':
                check(False, f'{flavor} #{i + 1} of {want} ACTIVE (got {status}: {fault})')
            active += 1
        check(active == want, f'{active} {flavor} servers ACTIVE on berth: the free capacity the import left')
        sid, status, node, fault = boot(f'post-{flavor}-over', fid)
        check(status == 'ERROR' and 'No valid host' in (fault or ''),
              f'one more {flavor}: {status}, fault "{(fault or "")[:60]}"')
    print(f'boots after the switch took {time.time() - t0:.0f} s', flush=True)
    table = nodes()
    show('berth when full', table)
    check(all(used == cap for _, cap, used in table.values()), 'every node full to its capacity, none over')
    same = intact(servers)
    check(len(same) == len(servers), "the earlier servers' allocations are still intact")
    sid, victim = next(iter(servers.items()))
    rp = next(iter(victim['allocations']['allocations']))
    vcpus = victim['allocations']['allocations'][rp]['resources']['VCPU']
    before_used = table[rp][2]
    st, _ = nova('DELETE', f'/servers/{sid}')
    check(st == 204, f"delete earlier server {victim['name']}: {st}")
    t1 = time.time()
    while time.time() - t1 < A.timeout and nova('GET', f'/servers/{sid}')[0] != 404:
        time.sleep(0.5)
    allocations = placement('GET', f'/allocations/{sid}')[1]['allocations']
    used = placement('GET', f'/resource_providers/{rp}/usages')[1]['usages'].get('VCPU', 0)
    check(allocations == {} and used == before_used - vcpus,
          f"its allocation released in berth (allocations {allocations}; {table[rp][0]} VCPU used {before_used} -> {used})")


before() if A.step == 'before' else after()
