#!/usr/bin/env python3
"""Skipped tests of a tempest run, counted by reason (run it with tempest's
venv python, which has python-subunit).

    stestr last --subunit > last.subunit
    python skips.py last.subunit            # "count  reason" lines, most first
    python skips.py last.subunit --ids      # and the skipped ids per reason

A class skipped in setUpClass counts once per test of the class stestr
reports (tempest reports each). Hex ids in reasons are replaced by {id}.
"""
import collections
import re
import sys

import subunit
import testtools

tests = {}
res = testtools.StreamToDict(lambda t: tests.__setitem__(t["id"], t))
res.startTestRun()
with open(sys.argv[1], "rb") as f:
    subunit.ByteStreamToStreamResult(f, non_subunit_name="stdout").run(res)
res.stopTestRun()
show_ids = "--ids" in sys.argv[2:]


def text(details, key):
    d = details.get(key)
    if d is None:
        return ""
    return "".join(bytes(x).decode("utf-8", "replace") for x in d.iter_bytes())


by = collections.defaultdict(list)
for tid, t in tests.items():
    if t["status"] != "skip":
        continue
    reason = text(t["details"], "reason").strip() or "(no reason given)"
    reason = re.sub(r"\s+", " ", reason)
    reason = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "{id}", reason)
    by[reason].append(re.sub(r"\[.*\]$", "", tid))
total = 0
for reason, ids in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
    total += len(ids)
    print(f"{len(ids):4}  {reason}")
    if show_ids:
        for i in sorted(ids):
            print(f"        {i}")
print(f"{total:4}  skipped in all")
