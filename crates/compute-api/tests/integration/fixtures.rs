//! Domain values shaped like the ones Nova's api-samples were recorded
//! with (m1.tiny, "new-server-test" in us-west, ...).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use berth_compute_model::cell::{
    power_state, vm_state, ActionEvent, ComputeNode, Fault, Instance, InstanceAction, Service,
};
use berth_compute_model::{
    Aggregate, BuildRequest, Flavor, GroupPolicy, ImageRef, InstanceMapping, InstanceSpec, RequestSpec, ServerGroup,
    Timestamp,
};

use crate::support::PROJECT;

/// 2023-11-14T22:13:20Z.
pub(crate) const T0: Timestamp = 1_700_000_000;

pub(crate) fn uuid(n: u128) -> Uuid {
    Uuid::from_u128(0x70a599e0_31e7_49b7_b260_868f441e0000 + n)
}

pub(crate) fn image_id() -> Uuid {
    Uuid::parse_str("70a599e0-31e7-49b7-b260-868f441e862b").expect("uuid")
}

pub(crate) fn flavor_tiny() -> Flavor {
    Flavor {
        id: 1,
        flavorid: "1".into(),
        name: "m1.tiny".into(),
        memory_mb: 512,
        vcpus: 1,
        root_gb: 1,
        ephemeral_gb: 0,
        swap: 0,
        rxtx_factor: 1.0,
        vcpu_weight: None,
        disabled: false,
        is_public: true,
        description: None,
        extra_specs: BTreeMap::new(),
        projects: BTreeSet::new(),
        created_at: T0,
        updated_at: None,
    }
}

pub(crate) fn spec() -> InstanceSpec {
    InstanceSpec {
        display_name: "new-server-test".into(),
        display_description: None,
        hostname: "new-server-test".into(),
        image_ref: Some(image_id()),
        image_properties: [("architecture", "x86_64"), ("auto_disk_config", "True"), ("custom_thing", "x")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        flavor: flavor_tiny(),
        metadata: [("My Server Name".to_owned(), "Apache1".to_owned())].into_iter().collect(),
        key_name: None,
        key_data: None,
        availability_zone: Some("us-west".into()),
        reservation_id: "r-3fhpjulh".into(),
        launch_index: 0,
        config_drive: String::new(),
        user_data: Some("IyEvYmluL2Jhc2gKL2Jpbi9zdQplY2hvICJJIGFtIGluIHlvdSEiCg==".into()),
        access_ip_v4: Some("1.2.3.4".into()),
        access_ip_v6: Some("80fe::".into()),
        tags: vec![],
        scheduler_hints: BTreeMap::new(),
        auto_disk_config: false,
        security_groups: Vec::new(),
        rescue_image: None,
        nics: 0,
    }
}

/// An ACTIVE server on host `compute`, as in Nova's samples.
pub(crate) fn instance(user: &str) -> Instance {
    let mut instance = Instance::from_spec(uuid(1), PROJECT, user, spec(), T0, vm_state::ACTIVE, None);
    instance.host = Some("compute".into());
    instance.node = Some("fake-mini".into());
    instance.availability_zone = Some("us-west".into());
    instance.power_state = power_state::RUNNING;
    instance.launched_at = Some(T0 + 5);
    instance.updated_at = Some(T0 + 5);
    instance
}

/// An ERROR server (scheduling failed), buried in cell0.
pub(crate) fn errored() -> (Instance, Fault) {
    let mut instance = Instance::from_spec(uuid(2), PROJECT, "fake", spec(), T0, vm_state::ERROR, None);
    instance.spec.key_name = Some("key1".into());
    let fault = Fault {
        instance_uuid: instance.uuid,
        code: 500,
        message: "No valid host was found. ".into(),
        details: "Traceback (most recent call last): ...".into(),
        host: None,
        created_at: T0 + 1,
    };
    (instance, fault)
}

pub(crate) fn request_spec(instance: &Instance) -> RequestSpec {
    RequestSpec {
        key_data: None,
        move_token: None,
        instance_uuid: instance.uuid,
        project_id: instance.project_id.clone(),
        user_id: instance.user_id.clone(),
        flavor: instance.spec.flavor.clone(),
        image: instance.spec.image_ref.map(|id| ImageRef {
            id,
            disk_format: Some("qcow2".into()),
            properties: BTreeMap::new(),
        }),
        num_instances: 1,
        availability_zone: Some("us-west".into()),
        force_host: None,
        force_node: None,
        group: None,
        same_host: vec![],
        different_host: vec![],
        hints: [("same_host".to_owned(), vec!["48e6a9f6-30af-47e0-bc04-acaed113bb4e".to_owned()])]
            .into_iter()
            .collect(),
        reservation_id: instance.spec.reservation_id.clone(),
        retry: Default::default(),
    }
}

pub(crate) fn build_request() -> BuildRequest {
    BuildRequest {
        instance_uuid: uuid(3),
        project_id: PROJECT.into(),
        user_id: "fake".into(),
        spec: spec(),
        created_at: T0,
        held: false,
    }
}

pub(crate) fn mapping(user: &str) -> InstanceMapping {
    InstanceMapping {
        instance_uuid: uuid(4),
        cell: Some(uuid(100)),
        project_id: PROJECT.into(),
        user_id: user.into(),
        queued_for_delete: false,
        created_at: T0,
    }
}

pub(crate) fn service(id: i64, host: &str, binary: &str) -> Service {
    Service {
        id,
        uuid: uuid(200 + id as u128),
        host: host.into(),
        binary: binary.into(),
        disabled: false,
        disabled_reason: None,
        forced_down: false,
        last_seen_up: Some(T0 + 60),
        created_at: T0,
        updated_at: Some(T0 + 30),
    }
}

pub(crate) fn compute_node() -> ComputeNode {
    ComputeNode {
        id: 1,
        uuid: uuid(300),
        host: "compute".into(),
        hypervisor_hostname: "host1".into(),
        hypervisor_type: "fake".into(),
        hypervisor_version: 1000,
        host_ip: "192.168.1.135".into(),
        vcpus: 2,
        memory_mb: 8192,
        local_gb: 1028,
        cpu_info: r#"{"arch": "x86_64", "model": "Nehalem", "vendor": "Intel", "features": ["pge", "clflush"], "topology": {"cores": 1, "threads": 1, "sockets": 4}}"#.into(),
        created_at: T0,
        updated_at: Some(T0),
    }
}

pub(crate) fn group(policy: GroupPolicy, max_server_per_host: Option<i64>) -> ServerGroup {
    ServerGroup {
        uuid: uuid(400),
        name: "test".into(),
        project_id: PROJECT.into(),
        user_id: "fake".into(),
        policy,
        max_server_per_host,
        members: vec![],
        created_at: T0,
    }
}

pub(crate) fn aggregate(hosts: &[&str]) -> Aggregate {
    Aggregate {
        id: 1,
        uuid: uuid(500),
        name: "name".into(),
        metadata: [("availability_zone".to_owned(), "london".to_owned())].into_iter().collect(),
        hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        created_at: T0,
        updated_at: None,
    }
}

pub(crate) fn action(with_events: bool) -> InstanceAction {
    InstanceAction {
        instance_uuid: uuid(1),
        action: "stop".into(),
        request_id: format!("req-{}", uuid(600)),
        user_id: "fake".into(),
        project_id: PROJECT.into(),
        start_time: T0,
        message: None,
        updated_at: Some(T0 + 2),
        events: if with_events {
            vec![ActionEvent {
                event: "compute_stop_instance".into(),
                start_time: T0,
                finish_time: Some(T0 + 2),
                result: Some("Success".into()),
                traceback: None,
                host: Some("compute".into()),
                details: None,
            }]
        } else {
            vec![]
        },
    }
}
