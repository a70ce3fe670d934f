#!/usr/bin/env python3
"""Load identical providers (same UUIDs) into two placement servers and compare
GET /allocation_candidates for flat, nested, granular, isolate, same_subtree,
root_required and forbidden-trait queries as sets (candidate order and the
order inside a mappings list are not meaningful upstream).

  scripts/compare_candidates.py http://127.0.0.1:8778 http://127.0.0.1:8779
"""
import json, sys, uuid, urllib.request, random
random.seed(3)
def mk(base):
    def req(m, p, body=None):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(base+p, data=data, method=m, headers={'x-auth-token':'admin','openstack-api-version':'placement 1.39','accept':'application/json', **({'content-type':'application/json'} if data is not None else {})})
        try:
            with urllib.request.urlopen(r) as resp:
                b = resp.read(); return resp.status, (json.loads(b) if b else None)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b'null')
    return req
servers = [mk(u) for u in sys.argv[1:3]]
agg = str(uuid.uuid4())
ops = [('PUT','/traits/CUSTOM_FOO',None)]
for i in range(40):
    u = str(uuid.uuid4())
    ops += [('POST','/resource_providers',{'name':f'cn{i}','uuid':u}),
            ('PUT',f'/resource_providers/{u}/inventories',{'resource_provider_generation':0,'inventories':{'VCPU':{'total':random.choice([1,2,8])},'MEMORY_MB':{'total':2048,'min_unit':random.choice([1,256,4096])},'DISK_GB':{'total':random.choice([5,100])}}}),
            ('PUT',f'/resource_providers/{u}/traits',{'resource_provider_generation':1,'traits':random.sample(['HW_CPU_X86_AVX2','CUSTOM_FOO','HW_CPU_X86_SSE'],random.randint(1,2))}),
            ('PUT',f'/resource_providers/{u}/aggregates',{'resource_provider_generation':2,'aggregates':[agg] if random.random()<0.7 else []})]
for t in range(15):
    root = str(uuid.uuid4()); n0=str(uuid.uuid4()); n1=str(uuid.uuid4())
    ops += [('POST','/resource_providers',{'name':f't{t}','uuid':root}),
            ('PUT',f'/resource_providers/{root}/inventories',{'resource_provider_generation':0,'inventories':{'DISK_GB':{'total':20480}}}),
            ('PUT',f'/resource_providers/{root}/traits',{'resource_provider_generation':1,'traits':['COMPUTE_VOLUME_MULTI_ATTACH']}),
            ('POST','/resource_providers',{'name':f't{t}n0','uuid':n0,'parent_provider_uuid':root}),
            ('PUT',f'/resource_providers/{n0}/inventories',{'resource_provider_generation':0,'inventories':{'VCPU':{'total':4,'reserved':2},'MEMORY_MB':{'total':2048,'min_unit':512,'step_size':256}}}),
            ('PUT',f'/resource_providers/{n0}/traits',{'resource_provider_generation':1,'traits':['HW_NUMA_ROOT']}),
            ('POST','/resource_providers',{'name':f't{t}n1','uuid':n1,'parent_provider_uuid':root}),
            ('PUT',f'/resource_providers/{n1}/inventories',{'resource_provider_generation':0,'inventories':{'VCPU':{'total':4},'MEMORY_MB':{'total':2048,'min_unit':256,'max_unit':1024}}}),
            ('PUT',f'/resource_providers/{n1}/traits',{'resource_provider_generation':1,'traits':['HW_NUMA_ROOT','CUSTOM_FOO']})]
    for parent, k in [(n0,1),(n1,2)]:
        for f in range(k):
            fp=str(uuid.uuid4())
            ops += [('POST','/resource_providers',{'name':f't{t}{parent[:4]}f{f}','uuid':fp,'parent_provider_uuid':parent}),
                    ('PUT',f'/resource_providers/{fp}/inventories',{'resource_provider_generation':0,'inventories':{'FPGA':{'total':1}}})]
for m,p,b in ops:
    for s in servers:
        st,_ = s(m,p,b)
        assert st < 300, (m,p,st,_)
queries = [
 f'resources=VCPU:1,DISK_GB:10,MEMORY_MB:256&member_of={agg}&required=HW_CPU_X86_AVX2',
 'resources=VCPU:1,MEMORY_MB:512',
 'resources=VCPU:2&required=!CUSTOM_FOO',
 'resources=DISK_GB:10&required=COMPUTE_VOLUME_MULTI_ATTACH&resources_COMPUTE=VCPU:1,MEMORY_MB:256&required_COMPUTE=CUSTOM_FOO&resources_FPGA=FPGA:1&group_policy=none&same_subtree=_COMPUTE,_FPGA',
 'resources1=VCPU:1&resources2=FPGA:1&group_policy=isolate',
 'resources1=VCPU:1&resources2=FPGA:1&group_policy=none',
 'resources=VCPU:1,FPGA:1',
 'resources=VCPU:2,MEMORY_MB:1024&root_required=COMPUTE_VOLUME_MULTI_ATTACH',
 'resources=FPGA:2',
 'resources_A=VCPU:1&required_A=HW_NUMA_ROOT&resources_B=MEMORY_MB:512&group_policy=isolate',
]
def norm(body):
    for r in body['allocation_requests']:
        for k in r.get('mappings', {}):
            r['mappings'][k] = sorted(r['mappings'][k])
    reqs = sorted(json.dumps(r, sort_keys=True) for r in body['allocation_requests'])
    sums = json.dumps(body['provider_summaries'], sort_keys=True)
    return reqs, sums
ok = 0
for q in queries:
    a = servers[0]('GET','/allocation_candidates?'+q); b = servers[1]('GET','/allocation_candidates?'+q)
    if a[0] != b[0]:
        print('STATUS DIFF', q, a[0], b[0]); continue
    if a[0] != 200:
        print('both', a[0], q); ok += 1; continue
    na, nb = norm(a[1]), norm(b[1])
    same = na == nb
    ok += same
    print('SAME' if same else 'DIFF', len(a[1]['allocation_requests']), len(b[1]['allocation_requests']), q)
    if not same:
        sa, sb = set(na[0]), set(nb[0])
        print('   only berth:', len(sa-sb), 'only real:', len(sb-sa), 'summaries equal:', na[1]==nb[1])
print(f'{ok}/{len(queries)} queries identical')
