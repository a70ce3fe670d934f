//! `/os-hosts` bodies (Nova's `hosts.py`, served until 2.42), and the
//! hypervisor bodies Nova served before 2.88 beside `/os-hypervisors`:
//! `statistics` and `{id}/uptime` (`hypervisors.py`).

use serde_json::{json, Map, Value};

use super::{hypervisors::HypervisorUsage, wrap};
use berth_compute_model::cell::ComputeNode;
use berth_compute_model::Timestamp;

/// One `GET /os-hosts` entry: `host_name`, `service` (the service's
/// topic: `compute`, `conductor`, `scheduler`), `zone`.
pub fn index_item(host: &str, topic: &str, zone: &str) -> Value {
    json!({"host_name": host, "service": topic, "zone": zone})
}

/// The `GET /os-hosts` body.
pub fn index(items: Vec<Value>) -> Value {
    wrap("hosts", Value::Array(items))
}

/// Resources of one instance on a host, for `GET /os-hosts/{host}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSize {
    /// Owning project.
    pub project_id: String,
    /// Flavor vCPUs.
    pub vcpus: i64,
    /// Flavor RAM (MiB).
    pub memory_mb: i64,
    /// Flavor root + ephemeral disk (GiB).
    pub disk_gb: i64,
}

fn resource(host: &str, project: &str, cpu: i64, memory_mb: i64, disk_gb: i64) -> Value {
    json!({"resource": {"host": host, "project": project, "cpu": cpu, "memory_mb": memory_mb, "disk_gb": disk_gb}})
}

/// The `GET /os-hosts/{host}` body: the node's `(total)`, `(used_now)`
/// (what placement counts), `(used_max)` (the instances' flavors summed),
/// then one entry per project in order of first appearance.
pub fn show(host: &str, node: &ComputeNode, used: &HypervisorUsage, instances: &[InstanceSize]) -> Value {
    let mut list = vec![
        resource(host, "(total)", node.vcpus, node.memory_mb, node.local_gb),
        resource(host, "(used_now)", used.vcpus_used, used.memory_mb_used, used.local_gb_used),
    ];
    let sum = |f: fn(&InstanceSize) -> i64| instances.iter().map(f).sum::<i64>();
    list.push(resource(host, "(used_max)", sum(|i| i.vcpus), sum(|i| i.memory_mb), sum(|i| i.disk_gb)));
    let mut projects: Vec<(String, i64, i64, i64)> = Vec::new();
    for instance in instances {
        match projects.iter_mut().find(|(p, ..)| *p == instance.project_id) {
            Some(entry) => {
                entry.1 += instance.vcpus;
                entry.2 += instance.memory_mb;
                entry.3 += instance.disk_gb;
            }
            None => projects.push((instance.project_id.clone(), instance.vcpus, instance.memory_mb, instance.disk_gb)),
        }
    }
    list.extend(projects.iter().map(|(p, cpu, mem, disk)| resource(host, p, *cpu, *mem, *disk)));
    wrap("host", Value::Array(list))
}

/// The `PUT /os-hosts/{host}` body: the host and what was set
/// (`enabled`/`disabled`, `on_maintenance`/`off_maintenance`).
pub fn update(host: &str, status: Option<&str>, maintenance_mode: Option<&str>) -> Value {
    let mut body = Map::new();
    body.insert("host".into(), json!(host));
    if let Some(status) = status {
        body.insert("status".into(), json!(status));
    }
    if let Some(mode) = maintenance_mode {
        body.insert("maintenance_mode".into(), json!(mode));
    }
    Value::Object(body)
}

/// Totals over the hypervisors of enabled compute services (Nova's
/// `compute_node_statistics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Hypervisors counted.
    pub count: i64,
    /// Sum of their vCPUs.
    pub vcpus: i64,
    /// Sum of their RAM (MiB).
    pub memory_mb: i64,
    /// Sum of their disk (GiB).
    pub local_gb: i64,
    /// vCPUs used.
    pub vcpus_used: i64,
    /// RAM used (MiB).
    pub memory_mb_used: i64,
    /// Disk used (GiB).
    pub local_gb_used: i64,
    /// Instances with a task in progress.
    pub current_workload: i64,
    /// Instances.
    pub running_vms: i64,
}

impl Statistics {
    /// Add one hypervisor.
    pub fn add(&mut self, node: &ComputeNode, usage: &HypervisorUsage) {
        self.count += 1;
        self.vcpus += node.vcpus;
        self.memory_mb += node.memory_mb;
        self.local_gb += node.local_gb;
        self.vcpus_used += usage.vcpus_used;
        self.memory_mb_used += usage.memory_mb_used;
        self.local_gb_used += usage.local_gb_used;
        self.current_workload += usage.current_workload;
        self.running_vms += usage.running_vms;
    }
}

/// The `GET /os-hypervisors/statistics` body (2.1–2.87). Free amounts are
/// the totals less the used ones; `disk_available_least` is unknown to
/// fake hosts and counted as 0, as Nova sums a missing value.
pub fn statistics(stats: &Statistics) -> Value {
    wrap(
        "hypervisor_statistics",
        json!({
            "count": stats.count,
            "vcpus_used": stats.vcpus_used,
            "local_gb_used": stats.local_gb_used,
            "memory_mb": stats.memory_mb,
            "current_workload": stats.current_workload,
            "vcpus": stats.vcpus,
            "running_vms": stats.running_vms,
            "free_disk_gb": stats.local_gb - stats.local_gb_used,
            "disk_available_least": 0,
            "local_gb": stats.local_gb,
            "free_ram_mb": stats.memory_mb - stats.memory_mb_used,
            "memory_mb_used": stats.memory_mb_used,
        }),
    )
}

/// What `uptime(1)` prints for a host up since `since`, seen at `now`:
/// ` HH:MM:SS up N days, HH:MM,  0 users,  load average: 0.00, 0.00, 0.00`
/// (the text Nova's drivers return; a fake host has no load).
pub fn uptime_text(since: Timestamp, now: Timestamp) -> String {
    let clock = super::strtime(now);
    let time_of_day = &clock[11..19];
    let up = (now - since).max(0);
    let (days, hours, minutes) = (up / 86_400, up % 86_400 / 3600, up % 3600 / 60);
    let day_part = match days {
        0 => String::new(),
        1 => "1 day, ".to_owned(),
        n => format!("{n} days, "),
    };
    format!(" {time_of_day} up {day_part}{hours:2}:{minutes:02},  0 users,  load average: 0.00, 0.00, 0.00")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_like_uptime() {
        assert_eq!(
            uptime_text(0, 93 * 86_400 + 3600 + 120),
            " 01:02:00 up 93 days,  1:02,  0 users,  load average: 0.00, 0.00, 0.00"
        );
        assert_eq!(uptime_text(100, 160), " 00:02:40 up  0:01,  0 users,  load average: 0.00, 0.00, 0.00");
    }

    #[test]
    fn host_resources_sum_per_project() {
        let node = ComputeNode {
            id: 1,
            uuid: uuid::Uuid::nil(),
            host: "h".into(),
            hypervisor_hostname: "h".into(),
            hypervisor_type: "fake".into(),
            hypervisor_version: 1,
            host_ip: "127.0.0.1".into(),
            vcpus: 8,
            memory_mb: 4096,
            local_gb: 100,
            cpu_info: "{}".into(),
            created_at: 0,
            updated_at: None,
        };
        let used = HypervisorUsage { vcpus_used: 3, memory_mb_used: 1536, local_gb_used: 3, ..Default::default() };
        let size = |p: &str, n: i64| InstanceSize { project_id: p.into(), vcpus: n, memory_mb: 512 * n, disk_gb: n };
        let body = show("h", &node, &used, &[size("a", 1), size("b", 1), size("a", 1)]);
        let list = body["host"].as_array().expect("list");
        assert_eq!(list.len(), 5);
        assert_eq!(list[0]["resource"]["project"], "(total)");
        assert_eq!(list[2]["resource"]["cpu"], 3);
        assert_eq!(
            list[3]["resource"],
            json!({"host": "h", "project": "a", "cpu": 2, "memory_mb": 1024, "disk_gb": 2})
        );
    }
}
