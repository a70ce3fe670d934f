//! Hand-written JSON encoding of the compute model's persisted types (the
//! domain types are not `Serialize`, by design). Both backends use it for
//! the control database's compute rows and the PostgreSQL change feed, and
//! the cell stores for an instance's spec.

use std::collections::{BTreeMap, BTreeSet};

use berth_compute_model::choice::HostChoice;
use berth_compute_model::{
    AgentCredential, Aggregate, BuildRequest, BuildRetry, CellMapping, ComputeChange, ComputeNodeRef, Flavor,
    GroupPolicy, HostMapping, Image, ImageHashes, ImageMember, ImageRef, InstanceMapping, InstanceSpec, KeyPair,
    KeyPairType, MetadefNamespace, RequestSpec, RowKey, ServerGroup,
};
use berth_model::AllocationMap;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::json_fields::{
    b, bad, f, field, get_hints, get_str_map, hints, i, opt_i, opt_s, opt_uuid, s, str_map, strings, uuid, uuid_list,
    uuids, Result,
};

/// A flavor.
pub fn flavor(flavor: &Flavor) -> Value {
    json!({
        "id": flavor.id, "flavorid": flavor.flavorid, "name": flavor.name, "memory_mb": flavor.memory_mb,
        "vcpus": flavor.vcpus, "root_gb": flavor.root_gb, "ephemeral_gb": flavor.ephemeral_gb, "swap": flavor.swap,
        "rxtx_factor": flavor.rxtx_factor, "vcpu_weight": flavor.vcpu_weight, "disabled": flavor.disabled,
        "is_public": flavor.is_public, "description": flavor.description, "extra_specs": str_map(&flavor.extra_specs),
        "projects": flavor.projects.iter().collect::<Vec<_>>(), "created_at": flavor.created_at,
        "updated_at": flavor.updated_at,
    })
}

/// Decode [`flavor`].
pub fn to_flavor(v: &Value) -> Result<Flavor> {
    Ok(Flavor {
        id: i(v, "id")?,
        flavorid: s(v, "flavorid")?,
        name: s(v, "name")?,
        memory_mb: i(v, "memory_mb")?,
        vcpus: i(v, "vcpus")?,
        root_gb: i(v, "root_gb")?,
        ephemeral_gb: i(v, "ephemeral_gb")?,
        swap: i(v, "swap")?,
        rxtx_factor: f(v, "rxtx_factor")?,
        vcpu_weight: opt_i(v, "vcpu_weight")?,
        disabled: b(v, "disabled")?,
        is_public: b(v, "is_public")?,
        description: opt_s(v, "description")?,
        extra_specs: get_str_map(v, "extra_specs")?,
        projects: strings(v, "projects")?.into_iter().collect::<BTreeSet<_>>(),
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

/// An image.
pub fn image(image: &Image) -> Value {
    json!({
        "id": image.id.to_string(), "name": image.name, "status": image.status, "visibility": image.visibility,
        "protected": image.protected, "owner": image.owner, "disk_format": image.disk_format,
        "container_format": image.container_format, "min_disk": image.min_disk, "min_ram": image.min_ram,
        "size": image.size, "tags": image.tags, "properties": str_map(&image.properties),
        "checksum": image.hashes.as_ref().map(|h| &h.checksum),
        "os_hash_algo": image.hashes.as_ref().map(|h| &h.os_hash_algo),
        "os_hash_value": image.hashes.as_ref().map(|h| &h.os_hash_value),
        "members": image.members.iter().map(|(project, m)| (project.clone(), json!({
            "status": m.status, "created_at": m.created_at, "updated_at": m.updated_at,
        }))).collect::<Map<String, Value>>(),
        "created_at": image.created_at, "updated_at": image.updated_at,
    })
}

/// Decode an image's members (rows written before images had members
/// have none).
fn to_image_members(v: &Value) -> Result<BTreeMap<String, ImageMember>> {
    let Some(members) = v.get("members").and_then(Value::as_object) else { return Ok(BTreeMap::new()) };
    members
        .iter()
        .map(|(project, m)| {
            let member = ImageMember {
                status: s(m, "status")?,
                created_at: i(m, "created_at")?,
                updated_at: i(m, "updated_at")?,
            };
            Ok((project.clone(), member))
        })
        .collect()
}

/// Decode [`image`].
pub fn to_image(v: &Value) -> Result<Image> {
    Ok(Image {
        id: uuid(v, "id")?,
        name: opt_s(v, "name")?,
        status: s(v, "status")?,
        visibility: s(v, "visibility")?,
        protected: b(v, "protected")?,
        owner: opt_s(v, "owner")?,
        disk_format: opt_s(v, "disk_format")?,
        container_format: opt_s(v, "container_format")?,
        min_disk: i(v, "min_disk")?,
        min_ram: i(v, "min_ram")?,
        size: opt_i(v, "size")?,
        // Rows written before images kept data have no hashes.
        hashes: match (opt_s(v, "checksum")?, opt_s(v, "os_hash_algo")?, opt_s(v, "os_hash_value")?) {
            (Some(checksum), Some(os_hash_algo), Some(os_hash_value)) => {
                Some(ImageHashes { checksum, os_hash_algo, os_hash_value })
            }
            _ => None,
        },
        tags: strings(v, "tags")?,
        properties: get_str_map(v, "properties")?,
        members: to_image_members(v)?,
        created_at: i(v, "created_at")?,
        updated_at: i(v, "updated_at")?,
    })
}

/// A server group.
pub fn server_group(group: &ServerGroup) -> Value {
    json!({
        "uuid": group.uuid.to_string(), "name": group.name, "project_id": group.project_id, "user_id": group.user_id,
        "policy": group.policy.as_str(), "max_server_per_host": group.max_server_per_host,
        "members": uuid_list(&group.members), "created_at": group.created_at,
    })
}

/// Decode [`server_group`].
pub fn to_server_group(v: &Value) -> Result<ServerGroup> {
    Ok(ServerGroup {
        uuid: uuid(v, "uuid")?,
        name: s(v, "name")?,
        project_id: s(v, "project_id")?,
        user_id: s(v, "user_id")?,
        policy: GroupPolicy::parse(&s(v, "policy")?).ok_or_else(|| bad("policy"))?,
        max_server_per_host: opt_i(v, "max_server_per_host")?,
        members: uuids(v, "members")?,
        created_at: i(v, "created_at")?,
    })
}

/// A key pair.
pub fn key_pair(key_pair: &KeyPair) -> Value {
    json!({
        "id": key_pair.id, "user_id": key_pair.user_id, "name": key_pair.name, "type": key_pair.key_type.as_str(),
        "public_key": key_pair.public_key, "fingerprint": key_pair.fingerprint, "created_at": key_pair.created_at,
    })
}

/// Decode [`key_pair`].
pub fn to_key_pair(v: &Value) -> Result<KeyPair> {
    Ok(KeyPair {
        id: i(v, "id")?,
        user_id: s(v, "user_id")?,
        name: s(v, "name")?,
        key_type: KeyPairType::parse(&s(v, "type")?).ok_or_else(|| bad("type"))?,
        public_key: s(v, "public_key")?,
        fingerprint: s(v, "fingerprint")?,
        created_at: i(v, "created_at")?,
    })
}

/// A cell mapping.
pub fn cell(cell: &CellMapping) -> Value {
    json!({"uuid": cell.uuid.to_string(), "name": cell.name, "database_connection": cell.database_connection,
           "disabled": cell.disabled})
}

/// Decode [`cell`].
pub fn to_cell(v: &Value) -> Result<CellMapping> {
    Ok(CellMapping {
        uuid: uuid(v, "uuid")?,
        name: s(v, "name")?,
        database_connection: s(v, "database_connection")?,
        disabled: b(v, "disabled")?,
    })
}

/// An instance spec (build requests, instance rows).
pub fn instance_spec(spec: &InstanceSpec) -> Value {
    json!({
        "display_name": spec.display_name, "display_description": spec.display_description,
        "hostname": spec.hostname, "image_ref": spec.image_ref.map(|u| u.to_string()),
        "image_properties": str_map(&spec.image_properties), "flavor": flavor(&spec.flavor),
        "metadata": str_map(&spec.metadata), "key_name": spec.key_name, "key_data": spec.key_data,
        "availability_zone": spec.availability_zone, "reservation_id": spec.reservation_id,
        "launch_index": spec.launch_index, "config_drive": spec.config_drive, "user_data": spec.user_data,
        "access_ip_v4": spec.access_ip_v4, "access_ip_v6": spec.access_ip_v6, "tags": spec.tags,
        "scheduler_hints": hints(&spec.scheduler_hints), "auto_disk_config": spec.auto_disk_config,
        "security_groups": spec.security_groups,
        "rescue_image": spec.rescue_image.map(|u| u.to_string()),
        "nics": spec.nics,
    })
}

/// Decode [`instance_spec`].
pub fn to_instance_spec(v: &Value) -> Result<InstanceSpec> {
    Ok(InstanceSpec {
        display_name: s(v, "display_name")?,
        display_description: opt_s(v, "display_description")?,
        hostname: s(v, "hostname")?,
        image_ref: opt_uuid(v, "image_ref")?,
        image_properties: get_str_map(v, "image_properties")?,
        flavor: to_flavor(field(v, "flavor")?)?,
        metadata: get_str_map(v, "metadata")?,
        key_name: opt_s(v, "key_name")?,
        key_data: opt_s(v, "key_data")?,
        availability_zone: opt_s(v, "availability_zone")?,
        reservation_id: s(v, "reservation_id")?,
        launch_index: i(v, "launch_index")?,
        config_drive: s(v, "config_drive")?,
        user_data: opt_s(v, "user_data")?,
        access_ip_v4: opt_s(v, "access_ip_v4")?,
        access_ip_v6: opt_s(v, "access_ip_v6")?,
        tags: strings(v, "tags")?,
        scheduler_hints: get_hints(v, "scheduler_hints")?,
        // Absent in specs written before it was kept: MANUAL.
        auto_disk_config: v.get("auto_disk_config").and_then(Value::as_bool).unwrap_or(false),
        // Absent in specs written before it was kept: none.
        security_groups: if v.get("security_groups").is_some() { strings(v, "security_groups")? } else { Vec::new() },
        // Absent in specs written before it was kept: none.
        rescue_image: if v.get("rescue_image").is_some() { opt_uuid(v, "rescue_image")? } else { None },
        // Absent in specs written before it was kept: none (those guests
        // were made without NICs).
        nics: v.get("nics").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
    })
}

/// A request spec.
pub fn request_spec(spec: &RequestSpec) -> Value {
    json!({
        "instance_uuid": spec.instance_uuid.to_string(), "project_id": spec.project_id, "user_id": spec.user_id,
        "flavor": flavor(&spec.flavor),
        "image": spec.image.as_ref().map(|i| json!({"id": i.id.to_string(), "disk_format": i.disk_format,
                                                     "properties": str_map(&i.properties)})),
        "num_instances": spec.num_instances, "availability_zone": spec.availability_zone,
        "force_host": spec.force_host, "force_node": spec.force_node, "group": spec.group.map(|g| g.to_string()),
        "same_host": uuid_list(&spec.same_host), "different_host": uuid_list(&spec.different_host),
        "hints": hints(&spec.hints), "reservation_id": spec.reservation_id,
        "retry": build_retry(&spec.retry), "key_data": spec.key_data, "move_token": spec.move_token,
    })
}

/// A request spec's retry info: alternates as `[[provider, {class:
/// amount}], ...]` lists so that their order survives.
fn build_retry(retry: &BuildRetry) -> Value {
    let alternates: Vec<Value> = retry
        .alternates
        .iter()
        .map(|choice| {
            let allocations: Vec<Value> = choice
                .allocations
                .iter()
                .map(|(provider, amounts)| {
                    let amounts: Vec<Value> = amounts.iter().map(|(class, amount)| json!([class, amount])).collect();
                    json!([provider.to_string(), amounts])
                })
                .collect();
            json!({"root": choice.root.to_string(), "allocations": allocations})
        })
        .collect();
    let mut v =
        json!({"num_attempts": retry.num_attempts, "failed_hosts": retry.failed_hosts, "alternates": alternates});
    if let Some(at) = retry.requeued_at {
        v["requeued_at"] = json!(at);
    }
    v
}

/// Decode [`build_retry`]; absent (written before reschedules existed) is
/// the default.
fn to_build_retry(v: Option<&Value>) -> Result<BuildRetry> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(BuildRetry::default()) };
    let mut alternates = Vec::new();
    for alt in v.get("alternates").and_then(Value::as_array).into_iter().flatten() {
        let mut allocations = AllocationMap::new();
        for pair in field(alt, "allocations")?.as_array().ok_or_else(|| bad("allocations"))? {
            let provider = pair.get(0).and_then(Value::as_str).and_then(|t| Uuid::parse_str(t).ok());
            let provider = provider.ok_or_else(|| bad("allocations"))?;
            let amounts = allocations.entry(provider).or_default();
            for amount in pair.get(1).and_then(Value::as_array).ok_or_else(|| bad("allocations"))? {
                let class = amount.get(0).and_then(Value::as_str).ok_or_else(|| bad("allocations"))?;
                let value = amount.get(1).and_then(Value::as_i64).ok_or_else(|| bad("allocations"))?;
                amounts.insert(class.to_owned(), value);
            }
        }
        alternates.push(HostChoice { root: uuid(alt, "root")?, allocations });
    }
    Ok(BuildRetry {
        num_attempts: opt_i(v, "num_attempts")?.unwrap_or(0),
        failed_hosts: strings(v, "failed_hosts")?,
        alternates,
        requeued_at: opt_i(v, "requeued_at")?,
    })
}

/// Decode [`request_spec`].
pub fn to_request_spec(v: &Value) -> Result<RequestSpec> {
    let image = match v.get("image") {
        None | Some(Value::Null) => None,
        Some(img) => Some(ImageRef {
            id: uuid(img, "id")?,
            disk_format: opt_s(img, "disk_format")?,
            properties: get_str_map(img, "properties")?,
        }),
    };
    Ok(RequestSpec {
        key_data: opt_s(v, "key_data")?,
        move_token: opt_s(v, "move_token")?,
        instance_uuid: uuid(v, "instance_uuid")?,
        project_id: s(v, "project_id")?,
        user_id: s(v, "user_id")?,
        flavor: to_flavor(field(v, "flavor")?)?,
        image,
        num_instances: i(v, "num_instances")?,
        availability_zone: opt_s(v, "availability_zone")?,
        force_host: opt_s(v, "force_host")?,
        force_node: opt_s(v, "force_node")?,
        group: opt_uuid(v, "group")?,
        same_host: uuids(v, "same_host")?,
        different_host: uuids(v, "different_host")?,
        hints: get_hints(v, "hints")?,
        reservation_id: s(v, "reservation_id")?,
        retry: to_build_retry(v.get("retry"))?,
    })
}

/// An aggregate.
pub fn aggregate(aggregate: &Aggregate) -> Value {
    json!({
        "id": aggregate.id, "uuid": aggregate.uuid.to_string(), "name": aggregate.name,
        "metadata": str_map(&aggregate.metadata), "hosts": aggregate.hosts.iter().collect::<Vec<_>>(),
        "created_at": aggregate.created_at, "updated_at": aggregate.updated_at,
    })
}

/// Decode [`aggregate`].
pub fn to_aggregate(v: &Value) -> Result<Aggregate> {
    Ok(Aggregate {
        id: i(v, "id")?,
        uuid: uuid(v, "uuid")?,
        name: s(v, "name")?,
        metadata: get_str_map(v, "metadata")?,
        hosts: strings(v, "hosts")?.into_iter().collect(),
        created_at: i(v, "created_at")?,
        updated_at: opt_i(v, "updated_at")?,
    })
}

/// How a control row is stored: `(kind, key)` and, for a put, its body.
pub fn row_key(key: &RowKey) -> (&'static str, String) {
    match key {
        RowKey::Flavor(id) => ("flavor", id.clone()),
        RowKey::Image(id) => ("image", id.to_string()),
        RowKey::ServerGroup(id) => ("server_group", id.to_string()),
        RowKey::Cell(id) => ("cell", id.to_string()),
        RowKey::HostMapping(h) => ("host_mapping", h.clone()),
        RowKey::AgentCredential(host) => ("agent_credential", host.clone()),
        RowKey::ComputeNode(id) => ("compute_node", id.to_string()),
        RowKey::InstanceMapping(id) => ("instance_mapping", id.to_string()),
        RowKey::BuildRequest(id) => ("build_request", id.to_string()),
        RowKey::RequestSpec(id) => ("request_spec", id.to_string()),
        RowKey::Quota(p, u, r) => ("quota", json!([p, u, r]).to_string()),
        RowKey::QuotaClass(c, r) => ("quota_class", json!([c, r]).to_string()),
        RowKey::Aggregate(id) => ("aggregate", id.to_string()),
        RowKey::ReservableHost(id) => ("rsv_host", id.to_string()),
        RowKey::Lease(id) => ("lease", id.to_string()),
        RowKey::ResourceProperty(t, n) => ("rsv_property", json!([t, n]).to_string()),
        RowKey::KeyPair(u, n) => ("key_pair", json!([u, n]).to_string()),
        RowKey::MetadefNamespace(n) => ("metadef_namespace", n.clone()),
    }
}

/// The stored form of a change: `(kind, key, Some(body))` for a put,
/// `(kind, key, None)` for a delete.
pub fn change_row(change: &ComputeChange) -> (&'static str, String, Option<Value>) {
    use ComputeChange as C;
    let (kind, key) = row_key(&change.key());
    let body = match change {
        C::PutFlavor(x) => Some(flavor(x)),
        C::PutImage(x) => Some(image(x)),
        C::PutServerGroup(x) => Some(server_group(x)),
        C::PutCell(x) => Some(cell(x)),
        C::PutHostMapping(h) => Some(match &h.owner {
            Some(owner) => json!({"host": h.host, "cell": h.cell.to_string(), "owner": owner}),
            None => json!({"host": h.host, "cell": h.cell.to_string()}),
        }),
        C::PutAgentCredential(c) => Some(json!({"host": c.host, "digest": c.digest, "created_at": c.created_at})),
        C::PutComputeNode(n) => {
            Some(json!({"uuid": n.uuid.to_string(), "host": n.host, "node": n.node, "cell": n.cell.to_string()}))
        }
        C::PutInstanceMapping(m) => Some(json!({
            "instance_uuid": m.instance_uuid.to_string(), "cell": m.cell.map(|c| c.to_string()),
            "project_id": m.project_id, "user_id": m.user_id, "queued_for_delete": m.queued_for_delete,
            "created_at": m.created_at,
        })),
        C::PutBuildRequest(r) => {
            let mut body = json!({
                "instance_uuid": r.instance_uuid.to_string(), "project_id": r.project_id, "user_id": r.user_id,
                "spec": instance_spec(&r.spec), "created_at": r.created_at,
            });
            // Written only when set: rows from before reserved servers read
            // back as not held.
            if r.held {
                body["held"] = json!(true);
            }
            Some(body)
        }
        C::PutRequestSpec(x) => Some(request_spec(x)),
        C::PutQuota { limit, .. } | C::PutQuotaClass { limit, .. } => Some(json!({"limit": limit})),
        C::PutAggregate(x) => Some(aggregate(x)),
        C::PutReservableHost(x) => Some(crate::lease_json::host(x)),
        C::PutLease(x) => Some(crate::lease_json::lease(x)),
        C::PutResourceProperty(x) => Some(crate::lease_json::property(x)),
        C::PutKeyPair(x) => Some(key_pair(x)),
        C::PutMetadefNamespace(x) => Some(json!({
            "namespace": x.namespace, "owner": x.owner, "visibility": x.visibility, "protected": x.protected,
            "document": x.document,
        })),
        _ => None,
    };
    (kind, key, body)
}

fn key_parts(key: &str, n: usize) -> Result<Vec<String>> {
    let parts: Vec<String> = serde_json::from_str(key).map_err(|_| bad("quota key"))?;
    if parts.len() != n {
        return Err(bad("quota key"));
    }
    Ok(parts)
}

/// Decode a stored row back into its change (`body` None: a delete).
pub fn row_change(kind: &str, key: &str, body: Option<&Value>) -> Result<ComputeChange> {
    use ComputeChange as C;
    let parse_uuid = |k: &str| Uuid::parse_str(k).map_err(|_| bad(kind));
    let Some(v) = body else {
        return Ok(match kind {
            "flavor" => C::DeleteFlavor(key.to_owned()),
            "image" => C::DeleteImage(parse_uuid(key)?),
            "server_group" => C::DeleteServerGroup(parse_uuid(key)?),
            "cell" => C::DeleteCell(parse_uuid(key)?),
            "host_mapping" => C::DeleteHostMapping(key.to_owned()),
            "agent_credential" => C::DeleteAgentCredential(key.to_owned()),
            "compute_node" => C::DeleteComputeNode(parse_uuid(key)?),
            "instance_mapping" => C::DeleteInstanceMapping(parse_uuid(key)?),
            "build_request" => C::DeleteBuildRequest(parse_uuid(key)?),
            "request_spec" => C::DeleteRequestSpec(parse_uuid(key)?),
            "quota" => {
                let p = key_parts(key, 3)?;
                C::DeleteQuota { project_id: p[0].clone(), user_id: p[1].clone(), resource: p[2].clone() }
            }
            "aggregate" => C::DeleteAggregate(key.parse().map_err(|_| bad(kind))?),
            "rsv_host" => C::DeleteReservableHost(key.parse().map_err(|_| bad(kind))?),
            "lease" => C::DeleteLease(crate::lease_json::lease_key(key)?),
            "rsv_property" => {
                let p = key_parts(key, 2)?;
                C::DeleteResourceProperty(p[0].clone(), p[1].clone())
            }
            "key_pair" => {
                let p = key_parts(key, 2)?;
                C::DeleteKeyPair(p[0].clone(), p[1].clone())
            }
            "metadef_namespace" => C::DeleteMetadefNamespace(key.to_owned()),
            other => return Err(bad(&format!("row kind {other}"))),
        });
    };
    Ok(match kind {
        "flavor" => C::PutFlavor(to_flavor(v)?),
        "image" => C::PutImage(to_image(v)?),
        "server_group" => C::PutServerGroup(to_server_group(v)?),
        "cell" => C::PutCell(to_cell(v)?),
        "host_mapping" => C::PutHostMapping(HostMapping {
            host: s(v, "host")?,
            cell: uuid(v, "cell")?,
            owner: v.get("owner").and_then(Value::as_str).map(str::to_owned),
        }),
        "agent_credential" => C::PutAgentCredential(AgentCredential {
            host: s(v, "host")?,
            digest: s(v, "digest")?,
            created_at: i(v, "created_at")?,
        }),
        "compute_node" => C::PutComputeNode(ComputeNodeRef {
            uuid: uuid(v, "uuid")?,
            host: s(v, "host")?,
            node: s(v, "node")?,
            cell: uuid(v, "cell")?,
        }),
        "instance_mapping" => C::PutInstanceMapping(InstanceMapping {
            instance_uuid: uuid(v, "instance_uuid")?,
            cell: opt_uuid(v, "cell")?,
            project_id: s(v, "project_id")?,
            user_id: s(v, "user_id")?,
            queued_for_delete: b(v, "queued_for_delete")?,
            created_at: i(v, "created_at")?,
        }),
        "build_request" => C::PutBuildRequest(BuildRequest {
            instance_uuid: uuid(v, "instance_uuid")?,
            project_id: s(v, "project_id")?,
            user_id: s(v, "user_id")?,
            spec: to_instance_spec(field(v, "spec")?)?,
            created_at: i(v, "created_at")?,
            held: v.get("held").and_then(Value::as_bool).unwrap_or(false),
        }),
        "request_spec" => C::PutRequestSpec(to_request_spec(v)?),
        "quota" => {
            let p = key_parts(key, 3)?;
            C::PutQuota {
                project_id: p[0].clone(),
                user_id: p[1].clone(),
                resource: p[2].clone(),
                limit: i(v, "limit")?,
            }
        }
        "quota_class" => {
            let p = key_parts(key, 2)?;
            C::PutQuotaClass { class_name: p[0].clone(), resource: p[1].clone(), limit: i(v, "limit")? }
        }
        "aggregate" => C::PutAggregate(to_aggregate(v)?),
        "rsv_host" => C::PutReservableHost(crate::lease_json::to_host(v)?),
        "lease" => C::PutLease(crate::lease_json::to_lease(v)?),
        "rsv_property" => C::PutResourceProperty(crate::lease_json::to_property(v)?),
        "key_pair" => C::PutKeyPair(to_key_pair(v)?),
        "metadef_namespace" => C::PutMetadefNamespace(MetadefNamespace {
            namespace: s(v, "namespace")?,
            owner: s(v, "owner")?,
            visibility: s(v, "visibility")?,
            protected: b(v, "protected")?,
            document: s(v, "document")?,
        }),
        other => return Err(bad(&format!("row kind {other}"))),
    })
}

/// A change as one JSON value (the PostgreSQL change feed).
pub fn change(change: &ComputeChange) -> Value {
    let (kind, key, body) = change_row(change);
    let mut out = Map::new();
    out.insert("kind".into(), json!(kind));
    out.insert("key".into(), json!(key));
    out.insert("body".into(), body.unwrap_or(Value::Null));
    Value::Object(out)
}

/// Decode [`change`].
pub fn to_change(v: &Value) -> Result<ComputeChange> {
    let body = v.get("body").filter(|b| !b.is_null());
    row_change(&s(v, "kind")?, &s(v, "key")?, body)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use berth_compute_model::lease;

    use super::*;

    fn sample_flavor() -> Flavor {
        Flavor {
            id: 3,
            flavorid: "m1.\"small\"".into(),
            name: "small ✓".into(),
            memory_mb: 2048,
            vcpus: 2,
            root_gb: 20,
            ephemeral_gb: 1,
            swap: 512,
            rxtx_factor: 1.5,
            vcpu_weight: Some(3),
            disabled: false,
            is_public: false,
            description: None,
            extra_specs: [("resources:VCPU".to_owned(), "0".to_owned())].into(),
            projects: ["p1".to_owned()].into(),
            created_at: 5,
            updated_at: None,
        }
    }

    fn spec() -> InstanceSpec {
        InstanceSpec {
            display_name: "vm".into(),
            display_description: Some("d".into()),
            hostname: "vm".into(),
            image_ref: Some(Uuid::new_v4()),
            image_properties: [("hw_disk_bus".to_owned(), "scsi".to_owned())].into(),
            flavor: sample_flavor(),
            metadata: [("k".to_owned(), "v".to_owned())].into(),
            key_name: Some("k".into()),
            key_data: Some("ssh-ed25519 AAAA k".into()),
            availability_zone: Some("az1".into()),
            reservation_id: "r-abc".into(),
            launch_index: 2,
            config_drive: String::new(),
            user_data: Some("aGk=".into()),
            access_ip_v4: None,
            access_ip_v6: Some("::1".into()),
            tags: vec!["t".into()],
            scheduler_hints: [("group".to_owned(), vec!["x".to_owned()])].into(),
            auto_disk_config: true,
            security_groups: vec!["default".to_owned()],
            rescue_image: Some(Uuid::from_u128(7)),
            nics: 2,
        }
    }

    #[test]
    fn every_change_round_trips() {
        use ComputeChange as C;
        let id = Uuid::new_v4();
        let changes = vec![
            C::PutFlavor(sample_flavor()),
            C::DeleteFlavor("m1".into()),
            C::PutImage(Image {
                id,
                name: None,
                status: "active".into(),
                visibility: "public".into(),
                protected: true,
                owner: Some("p".into()),
                disk_format: Some("qcow2".into()),
                container_format: None,
                min_disk: 1,
                min_ram: 0,
                size: Some(3),
                hashes: Some(ImageHashes {
                    checksum: "900150983cd24fb0d6963f7d28e17f72".into(),
                    os_hash_algo: "sha512".into(),
                    os_hash_value: "ddaf".into(),
                }),
                tags: vec![],
                properties: [("trait:CUSTOM_X".to_owned(), "required".to_owned())].into(),
                members: [("q".to_owned(), ImageMember { status: "accepted".into(), created_at: 1, updated_at: 2 })]
                    .into(),
                created_at: 1,
                updated_at: 2,
            }),
            C::DeleteImage(id),
            C::PutMetadefNamespace(MetadefNamespace {
                namespace: "OS::Compute::X".into(),
                owner: "p".into(),
                visibility: "private".into(),
                protected: true,
                document: r#"{"tags":[{"name":"t"}]}"#.into(),
            }),
            C::DeleteMetadefNamespace("OS::Compute::X".into()),
            C::PutServerGroup(ServerGroup {
                uuid: id,
                name: "g".into(),
                project_id: "p".into(),
                user_id: "u".into(),
                policy: GroupPolicy::AntiAffinity,
                max_server_per_host: Some(2),
                members: vec![Uuid::new_v4()],
                created_at: 3,
            }),
            C::DeleteServerGroup(id),
            C::PutCell(CellMapping {
                uuid: id,
                name: "cell1".into(),
                database_connection: "sqlite:///x".into(),
                disabled: true,
            }),
            C::DeleteCell(id),
            C::PutHostMapping(HostMapping { host: "h".into(), cell: id, owner: None }),
            C::PutHostMapping(HostMapping { host: "h2".into(), cell: id, owner: Some("agent-user".into()) }),
            C::DeleteHostMapping("h".into()),
            C::PutAgentCredential(AgentCredential { host: "h".into(), digest: "ab01".into(), created_at: 9 }),
            C::DeleteAgentCredential("h".into()),
            C::PutComputeNode(ComputeNodeRef { uuid: id, host: "h".into(), node: "n".into(), cell: id }),
            C::DeleteComputeNode(id),
            C::PutInstanceMapping(InstanceMapping {
                instance_uuid: id,
                cell: None,
                project_id: "p".into(),
                user_id: "u".into(),
                queued_for_delete: false,
                created_at: 4,
            }),
            C::DeleteInstanceMapping(id),
            C::PutBuildRequest(BuildRequest {
                instance_uuid: id,
                project_id: "p".into(),
                user_id: "u".into(),
                spec: spec(),
                created_at: 9,
                held: true,
            }),
            C::DeleteBuildRequest(id),
            C::PutRequestSpec(RequestSpec {
                key_data: Some("ssh-ed25519 AAAA k".into()),
                move_token: None,
                instance_uuid: id,
                project_id: "p".into(),
                user_id: "u".into(),
                flavor: sample_flavor(),
                image: Some(ImageRef { id, disk_format: None, properties: BTreeMap::new() }),
                num_instances: 2,
                availability_zone: None,
                force_host: Some("h".into()),
                force_node: None,
                group: Some(id),
                same_host: vec![id],
                different_host: vec![],
                hints: BTreeMap::new(),
                reservation_id: "r".into(),
                retry: BuildRetry {
                    num_attempts: 2,
                    failed_hosts: vec!["h1".into()],
                    alternates: vec![HostChoice {
                        root: id,
                        allocations: [
                            (id, [("VCPU".to_owned(), 1), ("MEMORY_MB".to_owned(), 512)].into_iter().collect()),
                            (Uuid::from_u128(7), [("DISK_GB".to_owned(), 1)].into_iter().collect()),
                        ]
                        .into_iter()
                        .collect(),
                    }],
                    requeued_at: Some(9),
                },
            }),
            C::DeleteRequestSpec(id),
            C::PutQuota { project_id: "p".into(), user_id: String::new(), resource: "cores".into(), limit: -1 },
            C::DeleteQuota { project_id: "p".into(), user_id: "u\"x".into(), resource: "ram".into() },
            C::PutQuotaClass { class_name: "default".into(), resource: "instances".into(), limit: 20 },
            C::PutAggregate(Aggregate {
                id: 7,
                uuid: id,
                name: "a".into(),
                metadata: [("availability_zone".to_owned(), "az".to_owned())].into(),
                hosts: ["h1".to_owned()].into(),
                created_at: 1,
                updated_at: Some(2),
            }),
            C::DeleteAggregate(7),
            C::PutKeyPair(KeyPair {
                id: 3,
                user_id: "u\"x".into(),
                name: "k 1".into(),
                key_type: KeyPairType::X509,
                public_key: "-----BEGIN CERTIFICATE-----\n...".into(),
                fingerprint: "aa:bb".into(),
                created_at: 5,
            }),
            C::DeleteKeyPair("u\"x".into(), "k 1".into()),
            C::PutReservableHost(lease::ReservableHost {
                id: 4,
                hypervisor_hostname: "n".into(),
                service_name: "h".into(),
                vcpus: 8,
                memory_mb: 1024,
                local_gb: 10,
                hypervisor_type: "QEMU".into(),
                hypervisor_version: 1,
                cpu_info: "{}".into(),
                availability_zone: String::new(),
                trust_id: "t".into(),
                reservable: false,
                extra: [("gpu".to_owned(), "true".to_owned())].into(),
                power: lease::HostPower {
                    state: lease::PowerState::PoweringOn,
                    since: 5,
                    issued_at: Some(5),
                    deadline: Some(605),
                },
                created_at: 1,
                updated_at: None,
            }),
            C::DeleteReservableHost(4),
            C::PutLease(lease::Lease {
                id,
                name: "l".into(),
                user_id: "u".into(),
                project_id: "p".into(),
                start: 10,
                end: 20,
                trust_id: "t".into(),
                status: lease::LeaseStatus::Active,
                degraded: true,
                on_end: lease::EndPolicy::Recycle,
                grace: Some(600),
                reservations: vec![
                    lease::Reservation {
                        id,
                        resource_id: id,
                        status: lease::ReservationStatus::Active,
                        missing_resources: true,
                        resources_changed: false,
                        kind: lease::ReservationKind::Host {
                            min: 1,
                            max: 2,
                            hypervisor_properties: "[]".into(),
                            resource_properties: String::new(),
                            before_end: "default".into(),
                        },
                        allocations: vec![lease::HostAllocation { host_id: 4, slots: 1 }],
                        recycling: vec![4],
                        recycle_until: Some(620),
                        created_at: 1,
                        updated_at: Some(2),
                    },
                    lease::Reservation {
                        id,
                        resource_id: id,
                        status: lease::ReservationStatus::Pending,
                        missing_resources: false,
                        resources_changed: true,
                        kind: lease::ReservationKind::Instance {
                            vcpus: 2,
                            memory_mb: 512,
                            disk_gb: 1,
                            amount: 3,
                            affinity: Some(false),
                            resource_properties: "[\"==\", \"$a\", \"b\"]".into(),
                            source_flavor: Some("f".into()),
                        },
                        allocations: vec![],
                        recycling: vec![],
                        recycle_until: None,
                        created_at: 1,
                        updated_at: None,
                    },
                ],
                events: vec![lease::LeaseEvent {
                    id,
                    event_type: lease::EventType::BeforeEndLease,
                    time: 15,
                    status: lease::EventStatus::InProgress,
                    created_at: 1,
                    updated_at: Some(3),
                }],
                created_at: 1,
                updated_at: None,
            }),
            C::DeleteLease(id),
            C::PutResourceProperty(lease::ResourceProperty {
                id,
                resource_type: "physical:host".into(),
                name: "gpu".into(),
                private: true,
                created_at: 1,
                updated_at: None,
            }),
            C::DeleteResourceProperty("physical:host".into(), "gpu".into()),
        ];
        for original in changes {
            let encoded = change(&original);
            let text = encoded.to_string();
            let decoded = to_change(&serde_json::from_str(&text).expect("json")).expect("decode");
            assert_eq!(decoded, original, "{text}");
        }
        assert!(to_change(&json!({"kind": "flavor", "key": "x", "body": {"id": "nope"}})).is_err());
    }

    /// A host row written before power management (no `power`) loads as
    /// `on`.
    #[test]
    fn old_host_rows_load_powered_on() {
        let row = json!({
            "id": 3, "hypervisor_hostname": "h", "service_name": "h", "vcpus": 1, "memory_mb": 1, "local_gb": 1,
            "hypervisor_type": "QEMU", "hypervisor_version": 1, "cpu_info": "{}", "availability_zone": "",
            "trust_id": "t", "reservable": true, "extra": {}, "created_at": 1, "updated_at": null,
        });
        let host = crate::lease_json::to_host(&row).expect("old row");
        assert_eq!(host.power, lease::HostPower::default());
        assert_eq!(host.power.state, lease::PowerState::On);
        let mut bad = row.clone();
        bad["power"] = json!({"state": "sleeping", "since": 1});
        assert!(crate::lease_json::to_host(&bad).is_err());
    }

    /// A lease row written before end policies (no `on_end`, `grace`,
    /// `recycling`, `recycle_until`) loads as `delete` with nothing
    /// recycling.
    #[test]
    fn old_lease_rows_load_with_the_delete_policy() {
        let row = json!({
            "id": "00000000-0000-0000-0000-000000000001", "name": "l", "user_id": "u", "project_id": "p",
            "start": 10, "end": 20, "trust_id": "t", "status": "ACTIVE", "degraded": false,
            "reservations": [{
                "id": "00000000-0000-0000-0000-000000000002", "resource_id": "00000000-0000-0000-0000-000000000003",
                "status": "active", "missing_resources": false, "resources_changed": false,
                "kind": {"type": "host", "min": 1, "max": 1, "hypervisor_properties": "",
                         "resource_properties": "", "before_end": "default"},
                "allocations": [[1, 1]], "created_at": 1, "updated_at": null,
            }],
            "events": [], "created_at": 1, "updated_at": null,
        });
        let lease = crate::lease_json::to_lease(&row).expect("old row");
        assert_eq!((lease.on_end, lease.grace), (lease::EndPolicy::Delete, None));
        assert!(lease.reservations[0].recycling.is_empty() && lease.reservations[0].recycle_until.is_none());
        let mut bad = row.clone();
        bad["on_end"] = json!("explode");
        assert!(crate::lease_json::to_lease(&bad).is_err());
    }
}
