#!/bin/bash
# Instructions per full GET /allocation_candidates answer, on a loaded
# machine as on a quiet one (callgrind counts, not time).
#
# usage: scripts/callgrind_candidates.sh SERVER_BINARY PORT SHAPE SIZE OUTDIR
#   e.g. scripts/callgrind_candidates.sh /tmp/berth-base 18711 flat 10000 /tmp/cg-base
#
# Serves SERVER_BINARY under valgrind with instrumentation off, loads the
# `berth bench candidates` shape through it (target/release/berth, or
# $BERTH), then counts exactly three identical full answers (after one
# unmeasured one) and writes OUTDIR/cg.out.1: `grep ^totals` / 3 is the
# figure per answer; `callgrind_annotate --inclusive=yes` splits it.
set -euo pipefail
server=$1; port=$2; shape=$3; size=$4; dir=$5
bench=${BERTH:-target/release/berth}
rm -rf "$dir"; mkdir -p "$dir/data"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/cg.out" \
  "$server" serve --listen "127.0.0.1:$port" --log warn --data-dir "$dir/data" > "$dir/serve.log" 2>&1 &
vpid=$!
for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 1; done
"$bench" bench candidates --shape "$shape" --size "$size" --limit-only --requests 10 --warmup 0 \
  --throughput-secs 0.1 --claims 0 --url "http://127.0.0.1:$port" > "$dir/bench.out" 2>&1
hdr=(-H 'x-auth-token: admin' -H 'openstack-api-version: placement 1.39')
rp=$(curl -s "${hdr[@]}" "http://127.0.0.1:$port/resource_providers" \
  | python3 -c "import json,sys; print(json.load(sys.stdin)['resource_providers'][0]['uuid'])")
agg=$(curl -s "${hdr[@]}" "http://127.0.0.1:$port/resource_providers/$rp/aggregates" \
  | python3 -c "import json,sys; a=json.load(sys.stdin)['aggregates']; print(a[0] if a else '')")
if [ "$shape" = flat ]; then
  q="resources=VCPU:1,DISK_GB:10,MEMORY_MB:256&member_of=$agg&required=HW_CPU_X86_AVX2"
else
  q="resources=DISK_GB:10&required=COMPUTE_VOLUME_MULTI_ATTACH&resources_COMPUTE=VCPU:1,MEMORY_MB:256&required_COMPUTE=CUSTOM_FOO&resources_FPGA=FPGA:1&group_policy=none&same_subtree=_COMPUTE,_FPGA"
fi
curl -s -o "$dir/answer.json" "${hdr[@]}" "http://127.0.0.1:$port/allocation_candidates?$q"
callgrind_control -i on "$vpid" > /dev/null
for _ in 1 2 3; do curl -s -o "$dir/answer.json" "${hdr[@]}" "http://127.0.0.1:$port/allocation_candidates?$q"; done
callgrind_control -i off "$vpid" > /dev/null
callgrind_control -d "$vpid" > /dev/null
kill "$vpid"; wait "$vpid" || true
echo "$(grep ^totals "$dir/cg.out.1") instructions for 3 answers of $(wc -c < "$dir/answer.json") bytes"
