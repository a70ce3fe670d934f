#!/usr/bin/env python3
"""Print the ORDER in which a Placement server lists allocations.

Runs a fixed scenario against an EMPTY server (fresh database, noauth2) and
prints one line per observation: the order of providers / consumers / resource
classes in the JSON objects of
  GET /allocations/{consumer}                (providers, classes per provider)
  GET /resource_providers/{rp}/allocations   (consumers, classes per consumer)
at microversions 1.12 and latest. Providers and consumers are printed by
short labels (legend on the first lines); output is deterministic, so run it
against two servers and diff:

  # real OpenStack Placement 16.0.0 (venv made by
  # /work/shared/placement-conformance/run.py, default
  # /tmp/placement-conformance-venv):
  D=$(mktemp -d); /tmp/placement-conformance-venv/bin/python \\
      /work/shared/placement-conformance/real_placement.py \\
      --port 18701 --workdir $D --policy-file '' &
  python3 scripts/allocation-order.py --url http://127.0.0.1:18701 \\
      > /tmp/alloc-order-real.txt

  # berth (cargo build --release -p berth):
  D=$(mktemp -d); target/release/berth serve --listen 127.0.0.1:18702 \\
      --data-dir $D &
  python3 scripts/allocation-order.py --url http://127.0.0.1:18702 \\
      > /tmp/alloc-order-berth.txt
  diff /tmp/alloc-order-real.txt /tmp/alloc-order-berth.txt

Real Placement 16.0.0 (SQLite; no ORDER BY in placement/objects/
allocation.py, so the order is that of the index SQLite walks):
  GET /allocations/{c}: rows by allocation id (index allocations_consumer_id_idx
    = (consumer_id, rowid)) = the body order of the consumer's LAST write
    (providers in body order, classes in body order within a provider).
  GET /resource_providers/{rp}/allocations: rows by (resource_class_id, used,
    allocation id) (index allocations_resource_provider_class_used_idx);
    consumers in order of their first row, classes by class id (VCPU=0,
    MEMORY_MB=1, DISK_GB=2, ..., CUSTOM_* >= 10000 in creation order).
  Every write (PUT, POST /allocations, POST /reshaper) deletes and re-inserts
  all rows of the consumers it names, in body order, so they get new ids.
  1.12 and latest are identical.

Writes use microversion latest (consumer_generation + consumer_type).
Python 3 standard library only.
"""
import argparse
import json
import sys
import urllib.error
import urllib.request

URL = None
PROJ, USER = '11111111-1111-1111-1111-111111111111', 'order-user'
CUSTOM = 'CUSTOM_ORDER_TEST'


def u(d):
    """A uuid made of one repeated hex digit: u('f') = ffffffff-ffff-..."""
    return '-'.join(d * n for n in (8, 4, 4, 4, 12))


# Providers, created in THIS order (internal id order 8888 < ffff < 0000,
# which is neither uuid order nor the order of the first write below).
RPS = {'8888': u('8'), 'ffff': u('f'), '0000': u('0'), '4444': u('4'),
       '2222': u('2'), '6666': u('6'), '7777': u('7')}
# Consumers: label -> uuid; uuid order deliberately differs from label order.
CONS = {'A': u('c'), 'B': u('3'), 'D': u('d'), 'E': u('5'), 'F': u('a'),
        'P1': u('e'), 'P2': u('1'), 'P3': u('9'), 'Q1': u('b'),
        'Q2': u('2'), 'Q3': u('8'), 'Q4': u('6'),
        'S1': u('7'), 'S2': u('4'), 'S3': u('0'), 'R1': u('f')}
RP_LABEL = {v: k for k, v in RPS.items()}
CONS_LABEL = {v: k for k, v in CONS.items()}


def call(method, path, body=None, version='latest', ok=(200, 201, 204)):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header('X-Auth-Token', 'admin')
    req.add_header('OpenStack-API-Version', 'placement %s' % version)
    req.add_header('Accept', 'application/json')
    if data is not None:
        req.add_header('Content-Type', 'application/json')
    try:
        with urllib.request.urlopen(req) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    if status not in ok:
        sys.exit('%s %s -> %s %s' % (method, path, status, raw[:400]))
    # json.loads keeps the key order of the wire: that is what we observe.
    return json.loads(raw) if raw else None


def gen(c):
    """Current consumer generation (None for a consumer without allocations)."""
    return call('GET', '/allocations/%s' % CONS[c]).get('consumer_generation')


def entry(c, allocs):
    """One consumer's part of a write body; allocs = [(rp, {rc: n}), ...]."""
    return {'allocations': {RPS[rp]: {'resources': res} for rp, res in allocs},
            'project_id': PROJ, 'user_id': USER, 'consumer_generation': gen(c),
            'consumer_type': 'INSTANCE'}


def put(c, *allocs):
    call('PUT', '/allocations/%s' % CONS[c], entry(c, allocs))


def post(*items):
    """POST /allocations; items = [(consumer, [(rp, res), ...]), ...]."""
    call('POST', '/allocations', {CONS[c]: entry(c, a) for c, a in items})


def fmt(allocs, label):
    """'key1,key2 classes[key1]=RC,RC ...' for an 'allocations' object."""
    keys = [label.get(k, k) for k in allocs]
    cls = ['classes[%s]=%s' % (label.get(k, k), ','.join(v['resources']))
           for k, v in allocs.items()]
    return ','.join(keys) + ' ' + ' '.join(cls)


def show(step, consumers=(), providers=()):
    """Print the listings of the given consumers and providers, both versions."""
    for v in ('1.12', 'latest'):
        for c in consumers:
            a = call('GET', '/allocations/%s' % CONS[c], version=v)
            print('%s | consumer %s @%s: providers=%s'
                  % (step, c, v, fmt(a['allocations'], RP_LABEL)))
        for rp in providers:
            a = call('GET', '/resource_providers/%s/allocations' % RPS[rp],
                     version=v)
            print('%s | provider %s @%s: consumers=%s'
                  % (step, rp, v, fmt(a['allocations'], CONS_LABEL)))


def main():
    global URL
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--url', required=True, help='placement root URL')
    URL = ap.parse_args().url.rstrip('/')
    for k, v in list(RPS.items()) + list(CONS.items()):
        print('legend %s=%s' % (k, v))

    # --- setup: custom class, providers, inventories (same on every rp) ---
    call('PUT', '/resource_classes/%s' % CUSTOM, version='1.7')
    inv = {rc: {'total': 100000} for rc in
           ('VCPU', 'MEMORY_MB', 'DISK_GB', CUSTOM)}
    for label, uuid in RPS.items():
        call('POST', '/resource_providers', {'uuid': uuid, 'name': 'rp-' + label})
        call('PUT', '/resource_providers/%s/inventories' % uuid,
             {'resource_provider_generation': 0, 'inventories': inv})

    vm = {'VCPU': 1, 'MEMORY_MB': 64}
    # (a) provider order on a consumer: body order? uuid? provider id?
    put('A', ('ffff', vm), ('0000', vm))
    show('01 put A(ffff,0000)', ['A'], ['ffff', '0000'])
    put('B', ('0000', vm), ('ffff', vm))
    show('02 put B(0000,ffff)', ['B'], ['ffff', '0000'])
    put('A', ('0000', vm), ('ffff', vm))            # re-PUT, other order
    show('03 re-put A(0000,ffff)', ['A'], ['ffff', '0000'])
    put('A', ('ffff', vm), ('8888', vm), ('0000', vm))  # keep 2, add 8888
    show('04 re-put A(ffff,8888,0000)', ['A'], ['ffff', '8888', '0000'])

    # resource class order: body order vs class id (VCPU=0, MEMORY_MB=1,
    # DISK_GB=2, CUSTOM_*>=10000) vs name order
    put('D', ('8888', {'MEMORY_MB': 1, 'VCPU': 1}))
    put('E', ('8888', {'VCPU': 1, 'MEMORY_MB': 1}))
    put('F', ('8888', {CUSTOM: 1, 'DISK_GB': 1, 'VCPU': 1, 'MEMORY_MB': 1}),
        ('0000', {'DISK_GB': 2, CUSTOM: 2, 'MEMORY_MB': 2}))
    show('05 put D(MEM,VCPU) E(VCPU,MEM) F(C,DISK,VCPU,MEM)',
         ['D', 'E', 'F'], ['8888'])

    # (b) consumers on a provider: written one after another, then the
    # first one re-written (same amounts)
    for c in ('P1', 'P2', 'P3'):
        put(c, ('4444', {'VCPU': 1}))
    show('06 put P1,P2,P3', [], ['4444'])
    put('P1', ('4444', {'VCPU': 1}))
    show('07 re-put P1', [], ['4444'])
    put('P2', ('4444', {'VCPU': 1, 'MEMORY_MB': 1}))  # re-write, adds a class
    show('08 re-put P2(+MEM)', [], ['4444'])

    # does the amount ('used') or the class matter? Q4 has only MEMORY_MB
    # and is written first; Q1..Q3 VCPU 3,1,2
    put('Q4', ('2222', {'MEMORY_MB': 5}))
    put('Q1', ('2222', {'VCPU': 3}))
    put('Q2', ('2222', {'VCPU': 1}))
    put('Q3', ('2222', {'VCPU': 2}))
    show('09 put Q4(MEM) Q1(V3) Q2(V1) Q3(V2)', [], ['2222'])
    put('Q1', ('2222', {'VCPU': 1}))                # re-write with VCPU 1
    show('10 re-put Q1(V1)', [], ['2222'])

    # POST /allocations: several consumers in one body (body order S2,S1,S3)
    post(('S2', [('6666', vm)]), ('S1', [('6666', vm), ('0000', vm)]),
         ('S3', [('6666', vm)]))
    show('11 post S2,S1,S3', ['S1'], ['6666'])
    post(('S1', [('6666', vm)]), ('S3', [('6666', vm)]))  # rewrite two
    show('12 post S1,S3 again', [], ['6666'])

    # POST /reshaper (latest): same inventory on 7777, allocations for R1
    # (new) and S2 (existing, moved from 6666 to 7777 + 6666)
    g = call('GET', '/resource_providers/%s' % RPS['7777'])['generation']
    call('POST', '/reshaper', {
        'inventories': {RPS['7777']: {'resource_provider_generation': g,
                                      'inventories': inv}},
        'allocations': {CONS['R1']: entry('R1', [('7777', vm)]),
                        CONS['S2']: entry('S2', [('7777', vm),
                                                 ('6666', vm)])}})
    show('13 reshape R1,S2', ['S2'], ['7777', '6666'])


if __name__ == '__main__':
    main()
