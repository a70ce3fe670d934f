//! `GET /servers/{id}/diagnostics` bodies (Nova's `server_diagnostics.py`
//! and its view). berth's hosts are fake, so the figures are made up the
//! way Nova's fake driver makes them up, sized from the server's flavor:
//! one CPU entry per vCPU, one disk, no NICs (there are no networks).

use serde_json::{json, Map, Value};

use crate::ComputeVersion;

/// What the diagnostics of one server are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticsSource<'a> {
    /// The guest is running (else `shutdown`).
    pub running: bool,
    /// Seconds since it was launched, if it was.
    pub uptime: Option<i64>,
    /// `config_drive` was asked for.
    pub config_drive: bool,
    /// Flavor vCPUs.
    pub vcpus: i64,
    /// Flavor RAM (MiB).
    pub memory_mb: i64,
    /// The node's hypervisor type.
    pub hypervisor: &'a str,
}

/// The diagnostics body at `version`: before 2.48 a driver-specific flat
/// object, from 2.48 Nova's standard shape (`driver` is `libvirt`, as
/// Nova's fake driver reports it: the response schema allows only real
/// drivers).
pub fn show(version: ComputeVersion, source: &DiagnosticsSource<'_>) -> Value {
    if !version.at_least(48) {
        let mut body = Map::new();
        for cpu in 0..source.vcpus.max(0) {
            body.insert(format!("cpu{cpu}_time"), json!(17_300_000_000_i64));
        }
        body.insert("memory".into(), json!(source.memory_mb * 1024));
        body.insert("vda_errors".into(), json!(-1));
        body.insert("vda_read".into(), json!(262_144));
        body.insert("vda_read_req".into(), json!(112));
        body.insert("vda_write".into(), json!(5_778_432));
        body.insert("vda_write_req".into(), json!(488));
        return Value::Object(body);
    }
    let cpus: Vec<Value> = (0..source.vcpus.max(0))
        .map(|id| json!({"id": id, "time": 17_300_000_000_i64, "utilisation": if source.running { 15 } else { 0 }}))
        .collect();
    json!({
        "state": if source.running { "running" } else { "shutdown" },
        "driver": "libvirt",
        "hypervisor": source.hypervisor,
        "hypervisor_os": "linux",
        "uptime": source.uptime,
        "config_drive": source.config_drive,
        "num_cpus": cpus.len(),
        "num_nics": 0,
        "num_disks": 1,
        "disk_details": [{
            "read_bytes": 262_144, "read_requests": 112, "write_bytes": 5_778_432,
            "write_requests": 488, "errors_count": 0,
        }],
        "cpu_details": cpus,
        "nic_details": [],
        "memory_details": {"maximum": source.memory_mb, "used": 0},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_change_at_2_48() {
        let source = DiagnosticsSource {
            running: true,
            uptime: Some(60),
            config_drive: false,
            vcpus: 2,
            memory_mb: 512,
            hypervisor: "fake",
        };
        let old = show(ComputeVersion(47), &source);
        assert_eq!(old["cpu1_time"], 17_300_000_000_i64);
        assert_eq!(old["memory"], 524_288);
        let new = show(ComputeVersion(48), &source);
        assert_eq!(new["num_cpus"], 2);
        assert_eq!(new["cpu_details"][1]["id"], 1);
        assert_eq!(new["memory_details"], json!({"maximum": 512, "used": 0}));
        assert_eq!(new["state"], "running");
    }
}
