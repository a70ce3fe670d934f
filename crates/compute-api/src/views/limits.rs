//! The `GET /limits` body (Nova's `views/limits.py`).

use serde_json::{json, Map, Value};

use crate::ComputeVersion;

/// `max*` absolute limits and the quota resource each shows, in the order
/// Nova builds them (its quota resources in registration order).
const ABSOLUTE: &[(&str, &str)] = &[
    ("maxTotalCores", "cores"),
    ("maxPersonality", "injected_files"),
    ("maxPersonalitySize", "injected_file_content_bytes"),
    ("maxTotalInstances", "instances"),
    ("maxTotalKeypairs", "key_pairs"),
    ("maxServerMeta", "metadata_items"),
    ("maxImageMeta", "metadata_items"),
    ("maxTotalRAMSize", "ram"),
    ("maxServerGroups", "server_groups"),
    ("maxServerGroupMembers", "server_group_members"),
    ("maxTotalFloatingIps", "floating_ips"),
    ("maxSecurityGroups", "security_groups"),
    ("maxSecurityGroupRules", "security_group_rules"),
];

/// `total*Used` values and the quota resource each counts.
const USED: &[(&str, &str)] = &[
    ("totalRAMUsed", "ram"),
    ("totalCoresUsed", "cores"),
    ("totalInstancesUsed", "instances"),
    ("totalFloatingIpsUsed", "floating_ips"),
    ("totalSecurityGroupsUsed", "security_groups"),
    ("totalServerGroupsUsed", "server_groups"),
];

/// Resources hidden at `version`: the network ones from 2.36, and the
/// file-injection ones from 2.57.
fn hidden(version: ComputeVersion, resource: &str) -> bool {
    (version.at_least(36) && ["floating_ips", "security_groups", "security_group_rules"].contains(&resource))
        || (version.at_least(57) && ["injected_files", "injected_file_content_bytes"].contains(&resource))
}

/// The `GET /limits` body: `{"limits": {"absolute": {...}, "rate": []}}`.
/// `limit` and `in_use` give each quota resource's project limit and
/// counted usage. 2.36 drops the network limits and usages, 2.39
/// `maxImageMeta` (the image-metadata proxy went away), 2.57 the
/// personality limits.
pub fn show(version: ComputeVersion, limit: impl Fn(&str) -> i64, in_use: impl Fn(&str) -> i64) -> Value {
    let mut absolute = Map::new();
    for (name, resource) in ABSOLUTE {
        if hidden(version, resource) || (*name == "maxImageMeta" && version.at_least(39)) {
            continue;
        }
        absolute.insert((*name).into(), json!(limit(resource)));
    }
    for (name, resource) in USED {
        if !hidden(version, resource) {
            absolute.insert((*name).into(), json!(in_use(resource)));
        }
    }
    json!({"limits": {"absolute": absolute, "rate": []}})
}
