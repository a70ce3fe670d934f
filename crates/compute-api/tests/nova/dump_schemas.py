#!/usr/bin/env python3
"""Regenerate tests/nova/{request,response}-schemas.json from a Nova source tree.

usage: dump_schemas.py NOVA_PACKAGE_DIR   (the directory holding api/, compute/, ...)

Nova's schema modules are plain dicts built with copy.deepcopy; they import a few
nova modules for constants, which are stubbed here so no OpenStack library is
needed. For every controller method, the decorators
    @validation.schema(schema.X, 'A', 'B')
    @validation.response_body_schema(schema.Y, 'A', 'B')
give which schema applies to which microversions; both are written as
    {"<controller>.<method>": [[min_minor, max_minor, schema], ...]}
with minors of 2.x (2.0 rows are dropped: berth does not serve the v2.0 API).

Nova's description pattern (a character class listing every printable code
point, ~20 kB) is replaced by the marker "<nova:printable>" to keep the files
small; the Rust tests know it.
"""
import importlib.util
import json
import os
import re
import sys
import types

ROOT = sys.argv[1]
OUT = os.path.dirname(os.path.abspath(__file__))

CONTROLLERS = {
    "servers": "servers",
    "flavors": "flavors",
    "flavors_extraspecs": "flavors_extraspecs",
    "flavor_access": "flavor_access",
    "server_groups": "server_groups",
    "quota_sets": "quota_sets",
    "aggregates": "aggregates",
    "services": "services",
    "hypervisors": "hypervisors",
    "availability_zone": "availability_zone",
    "instance_actions": "instance_actions",
    "limits": "limits",
    "versionsV21": "versions",
}
# Only these methods' schemas are kept (the rest of Nova's API is not berth's).
METHODS = {
    "servers": {"index", "detail", "show", "create", "update", "_start", "_stop", "_reboot"},
    "flavors": {"index", "detail", "show", "create", "update"},
    "flavors_extraspecs": {"index", "show", "create", "update"},
    "flavor_access": {"index", "_add_tenant_access", "_remove_tenant_access"},
    "server_groups": {"index", "show", "create"},
    "quota_sets": {"show", "detail", "defaults", "update"},
    "aggregates": {"index", "show", "create", "update", "_add_host", "_remove_host", "_set_metadata"},
    "services": {"index", "update"},
    "hypervisors": {"index", "detail", "show", "servers"},
    "availability_zone": {"index", "detail"},
    "instance_actions": {"index", "show"},
    "limits": {"index"},
    "versionsV21": {"show"},
}


def stub(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__path__ = []
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    return module


for package in ["nova", "nova.api", "nova.api.validation", "nova.api.openstack", "nova.api.openstack.compute",
                "nova.api.openstack.compute.schemas", "nova.objects", "nova.compute"]:
    stub(package)
stub("nova.i18n", _=lambda s: s)
stub("nova.objects.tag", MAX_TAG_LENGTH=60)
stub("nova.objects.instance", MAX_TAG_COUNT=50)
stub("nova.objects.external_event", EVENT_NAMES=[], EVENT_STATUSES=[])
stub("nova.compute.vm_states", **{k: k.lower() for k in (
    "ACTIVE BUILDING PAUSED SUSPENDED STOPPED RESCUED RESIZED SOFT_DELETED DELETED ERROR SHELVED "
    "SHELVED_OFFLOADED").split()})
parameter_types = load("nova.api.validation.parameter_types", ROOT + "/api/validation/parameter_types.py")
load("nova.api.validation.response_types", ROOT + "/api/validation/response_types.py")
PRINTABLE = parameter_types.description["pattern"]

schemas = {}
for module in sorted(set(CONTROLLERS.values()) | {"aggregate_images"}):
    schemas[module] = load("nova.api.openstack.compute.schemas." + module,
                           ROOT + "/api/openstack/compute/schemas/%s.py" % module)


def minor(text):
    major, _, rest = text.partition(".")
    assert major == "2", text
    return int(rest or 0)


def scrub(value):
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if value == PRINTABLE:
        return "<nova:printable>"
    return value


DECORATOR = re.compile(r"@validation\.(schema|response_body_schema)\(\s*(\w+)\.(\w+)(?:\s*,\s*['\"]([\d.]+)['\"])?"
                       r"(?:\s*,\s*['\"]([\d.]+)['\"])?")
requests, responses = {}, {}
for controller, schema_module in CONTROLLERS.items():
    source = open(ROOT + "/api/openstack/compute/%s.py" % controller).read()
    pending = []
    for line in source.splitlines():
        match = DECORATOR.search(line)
        if match:
            pending.append(match.groups())
            continue
        method = re.match(r"\s+def (\w+)\(", line)
        if not method:
            continue
        name, found, pending = method.group(1), pending, []
        if name not in METHODS[controller]:
            continue
        for kind, alias, attr, low, high in found:
            module = schemas[schema_module if alias == "schema" else alias]
            low = minor(low) if low else 1
            high = minor(high) if high else 10_000
            if high < 1:
                continue
            target = requests if kind == "schema" else responses
            target.setdefault("%s.%s" % (controller, name), []).append(
                [max(low, 1), high, scrub(getattr(module, attr))])

for name, rows in (("request-schemas.json", requests), ("response-schemas.json", responses)):
    with open(os.path.join(OUT, name), "w") as out:
        out.write("{\n")
        keys = sorted(rows)
        for i, key in enumerate(keys):
            out.write(json.dumps(key) + ": [\n")
            for j, row in enumerate(sorted(rows[key], key=lambda r: r[0])):
                out.write(json.dumps(row, sort_keys=True, separators=(",", ":")))
                out.write(",\n" if j + 1 < len(rows[key]) else "\n")
            out.write("]" + (",\n" if i + 1 < len(keys) else "\n"))
        out.write("}\n")
