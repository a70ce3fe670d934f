//! Encoding of change sets for the change feed (`berth_changes.payload`).
//! Hand-written so the model stays free of serde; the format is private to
//! this backend and versioned by the `"v"` key.

use std::collections::{BTreeMap, BTreeSet};

use berth_compute_model::{WorldChange, WorldChangeSet};
use berth_model::{AllocationMap, Change, ConsumerRow, Inventory, ProviderRow, Uuid};
use serde_json::{json, Map, Value};

const FORMAT_VERSION: u64 = 1;

fn provider_row(row: &ProviderRow) -> Value {
    json!({
        "id": row.id, "uuid": row.uuid.to_string(), "name": row.name, "generation": row.generation,
        "parent": row.parent.map(|p| p.to_string()), "root": row.root.to_string(),
        "created_at": row.created_at, "updated_at": row.updated_at,
    })
}

fn consumer_row(row: &ConsumerRow) -> Value {
    json!({
        "uuid": row.uuid.to_string(), "project_id": row.project_id, "user_id": row.user_id,
        "generation": row.generation, "consumer_type": row.consumer_type,
        "created_at": row.created_at, "updated_at": row.updated_at,
    })
}

fn allocations(map: &AllocationMap) -> Value {
    Value::Object(
        map.iter()
            .map(|(provider, amounts)| {
                let amounts = amounts.iter().map(|(class, amount)| (class.clone(), json!(amount))).collect();
                (provider.to_string(), Value::Object(amounts))
            })
            .collect::<Map<String, Value>>(),
    )
}

/// Encode a change set (compute changes as `{"t": "compute", "c": ...}`,
/// in `berth_store::json`'s encoding).
#[cfg(test)]
pub(crate) fn encode(set: &WorldChangeSet) -> String {
    let mut feed = FeedText::new();
    for change in &set.changes {
        match change {
            WorldChange::Placement(change) => feed.placement(change),
            WorldChange::Compute(change) => {
                let (kind, key, body) = berth_store::json::change_row(change);
                feed.compute(kind, &key, body.map(|body| body.to_string()).as_deref());
            }
        }
    }
    feed.finish()
}

/// A change feed payload written as text as the batch's writers succeed
/// (each writer's changes once it is written, in order), the compute rows
/// with the bodies their rows got, so nothing is encoded twice. The hot
/// placement changes (provider generations, consumers) are written
/// directly; the others through [`placement_change`].
pub(crate) struct FeedText {
    text: String,
    empty: bool,
}

impl FeedText {
    pub(crate) fn new() -> Self {
        FeedText { text: format!("{{\"v\":{FORMAT_VERSION},\"changes\":["), empty: true }
    }

    fn next(&mut self) {
        if !std::mem::take(&mut self.empty) {
            self.text.push(',');
        }
    }

    /// A compute change as its row: kind, key and body (JSON text; `None`
    /// for a row gone).
    pub(crate) fn compute(&mut self, kind: &str, key: &str, body: Option<&str>) {
        self.next();
        let t = &mut self.text;
        t.push_str("{\"t\":\"compute\",\"c\":{\"kind\":");
        push_str(t, kind);
        t.push_str(",\"key\":");
        push_str(t, key);
        t.push_str(",\"body\":");
        t.push_str(body.unwrap_or("null"));
        t.push_str("}}");
    }

    pub(crate) fn placement(&mut self, change: &Change) {
        self.next();
        let t = &mut self.text;
        match change {
            Change::PutProvider { row, expected_generation } => {
                t.push_str("{\"t\":\"put_provider\",\"row\":{\"id\":");
                push_int(t, row.id);
                t.push_str(",\"uuid\":\"");
                push_uuid(t, &row.uuid);
                t.push_str("\",\"name\":");
                push_str(t, &row.name);
                t.push_str(",\"generation\":");
                push_int(t, row.generation);
                t.push_str(",\"parent\":");
                match &row.parent {
                    Some(parent) => {
                        t.push('"');
                        push_uuid(t, parent);
                        t.push('"');
                    }
                    None => t.push_str("null"),
                }
                t.push_str(",\"root\":\"");
                push_uuid(t, &row.root);
                t.push_str("\",\"created_at\":");
                push_int(t, row.created_at);
                t.push_str(",\"updated_at\":");
                push_int(t, row.updated_at);
                t.push_str("},\"expected\":");
                push_opt_int(t, *expected_generation);
                t.push('}');
            }
            Change::PutConsumer { row, expected_generation, allocations } => {
                t.push_str("{\"t\":\"put_consumer\",\"row\":{\"uuid\":\"");
                push_uuid(t, &row.uuid);
                t.push_str("\",\"project_id\":");
                push_str(t, &row.project_id);
                t.push_str(",\"user_id\":");
                push_str(t, &row.user_id);
                t.push_str(",\"generation\":");
                push_int(t, row.generation);
                t.push_str(",\"consumer_type\":");
                match &row.consumer_type {
                    Some(kind) => push_str(t, kind),
                    None => t.push_str("null"),
                }
                t.push_str(",\"created_at\":");
                push_int(t, row.created_at);
                t.push_str(",\"updated_at\":");
                push_int(t, row.updated_at);
                t.push_str("},\"expected\":");
                push_opt_int(t, *expected_generation);
                t.push_str(",\"allocations\":{");
                for (n, (provider, amounts)) in allocations.iter().enumerate() {
                    if n > 0 {
                        t.push(',');
                    }
                    t.push('"');
                    push_uuid(t, provider);
                    t.push_str("\":{");
                    for (m, (class, amount)) in amounts.iter().enumerate() {
                        if m > 0 {
                            t.push(',');
                        }
                        push_str(t, class);
                        t.push(':');
                        push_int(t, *amount);
                    }
                    t.push('}');
                }
                t.push_str("}}");
            }
            other => t.push_str(&placement_change(other).to_string()),
        }
    }

    pub(crate) fn finish(mut self) -> String {
        self.text.push_str("]}");
        self.text
    }
}

fn push_int(t: &mut String, n: i64) {
    t.push_str(itoa::Buffer::new().format(n));
}

fn push_opt_int(t: &mut String, n: Option<i64>) {
    match n {
        Some(n) => push_int(t, n),
        None => t.push_str("null"),
    }
}

fn push_uuid(t: &mut String, uuid: &Uuid) {
    t.push_str(uuid.hyphenated().encode_lower(&mut Uuid::encode_buffer()));
}

/// A JSON string (escaped by serde_json when it needs escaping).
fn push_str(t: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        t.push('"');
        t.push_str(s);
        t.push('"');
    } else {
        t.push_str(&Value::from(s).to_string());
    }
}

fn placement_change(change: &Change) -> Value {
    match change {
        Change::PutProvider { row, expected_generation } => {
            json!({"t": "put_provider", "row": provider_row(row), "expected": expected_generation})
        }
        Change::DeleteProvider { uuid, expected_generation } => {
            json!({"t": "delete_provider", "uuid": uuid.to_string(), "expected": expected_generation})
        }
        Change::SetInventories { provider, inventories } => json!({
            "t": "set_inventories", "provider": provider.to_string(),
            "inventories": inventories.iter().map(|(class, inv)| (class.clone(), json!([
                inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size, inv.allocation_ratio
            ]))).collect::<Map<String, Value>>(),
        }),
        Change::SetProviderTraits { provider, traits } => {
            json!({"t": "set_traits", "provider": provider.to_string(), "traits": traits})
        }
        Change::SetProviderAggregates { provider, aggregates } => json!({
            "t": "set_aggregates", "provider": provider.to_string(),
            "aggregates": aggregates.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        }),
        Change::PutConsumer { row, expected_generation, allocations: allocs } => json!({
            "t": "put_consumer", "row": consumer_row(row), "expected": expected_generation,
            "allocations": allocations(allocs),
        }),
        Change::DeleteConsumer { uuid, expected_generation } => {
            json!({"t": "delete_consumer", "uuid": uuid.to_string(), "expected": expected_generation})
        }
        Change::PutResourceClass { id, name, created_at, updated_at } => json!({
            "t": "put_class", "id": id, "name": name, "created_at": created_at, "updated_at": updated_at,
        }),
        Change::DeleteResourceClass { name } => json!({"t": "delete_class", "name": name}),
        Change::PutTrait { id, name, created_at } => {
            json!({"t": "put_trait", "id": id, "name": name, "created_at": created_at})
        }
        Change::DeleteTrait { name } => json!({"t": "delete_trait", "name": name}),
    }
}

/// Why a payload could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("undecodable change payload: {0}")]
pub(crate) struct DecodeError(String);

fn bad(what: &str) -> DecodeError {
    DecodeError(what.to_owned())
}

fn get_i64(v: &Value, key: &str) -> Result<i64, DecodeError> {
    v.get(key).and_then(Value::as_i64).ok_or_else(|| bad(key))
}

fn get_str<'a>(v: &'a Value, key: &str) -> Result<&'a str, DecodeError> {
    v.get(key).and_then(Value::as_str).ok_or_else(|| bad(key))
}

fn get_uuid(v: &Value, key: &str) -> Result<Uuid, DecodeError> {
    Uuid::parse_str(get_str(v, key)?).map_err(|_| bad(key))
}

fn opt_uuid(v: &Value, key: &str) -> Result<Option<Uuid>, DecodeError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => get_uuid(v, key).map(Some),
    }
}

fn opt_i64(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

/// Decode a change set.
pub(crate) fn decode(text: &str) -> Result<WorldChangeSet, DecodeError> {
    let root: Value = serde_json::from_str(text).map_err(|e| DecodeError(e.to_string()))?;
    if root.get("v").and_then(Value::as_u64) != Some(FORMAT_VERSION) {
        return Err(bad("unknown format version"));
    }
    let mut set = WorldChangeSet::new();
    for c in root.get("changes").and_then(Value::as_array).ok_or_else(|| bad("changes"))? {
        let change = match get_str(c, "t")? {
            "compute" => {
                let inner = c.get("c").ok_or_else(|| bad("c"))?;
                let change = berth_store::json::to_change(inner).map_err(|e| DecodeError(e.to_string()))?;
                set.compute(change);
                continue;
            }
            "put_provider" => {
                let r = c.get("row").ok_or_else(|| bad("row"))?;
                Change::PutProvider {
                    row: ProviderRow {
                        id: get_i64(r, "id")?,
                        uuid: get_uuid(r, "uuid")?,
                        name: get_str(r, "name")?.to_owned(),
                        generation: get_i64(r, "generation")?,
                        parent: opt_uuid(r, "parent")?,
                        root: get_uuid(r, "root")?,
                        created_at: get_i64(r, "created_at")?,
                        updated_at: get_i64(r, "updated_at")?,
                    },
                    expected_generation: opt_i64(c, "expected"),
                }
            }
            "delete_provider" => {
                Change::DeleteProvider { uuid: get_uuid(c, "uuid")?, expected_generation: get_i64(c, "expected")? }
            }
            "set_inventories" => {
                let mut inventories = BTreeMap::new();
                for (class, v) in c.get("inventories").and_then(Value::as_object).ok_or_else(|| bad("inventories"))? {
                    let f = v.as_array().ok_or_else(|| bad("inventory"))?;
                    let n = |i: usize| f.get(i).and_then(Value::as_i64).ok_or_else(|| bad("inventory field"));
                    inventories.insert(
                        class.clone(),
                        Inventory {
                            total: n(0)?,
                            reserved: n(1)?,
                            min_unit: n(2)?,
                            max_unit: n(3)?,
                            step_size: n(4)?,
                            allocation_ratio: f.get(5).and_then(Value::as_f64).ok_or_else(|| bad("ratio"))?,
                        },
                    );
                }
                Change::SetInventories { provider: get_uuid(c, "provider")?, inventories }
            }
            "set_traits" => Change::SetProviderTraits {
                provider: get_uuid(c, "provider")?,
                traits: c
                    .get("traits")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("traits"))?
                    .iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect::<BTreeSet<_>>(),
            },
            "set_aggregates" => Change::SetProviderAggregates {
                provider: get_uuid(c, "provider")?,
                aggregates: c
                    .get("aggregates")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("aggregates"))?
                    .iter()
                    .map(|a| a.as_str().and_then(|s| Uuid::parse_str(s).ok()).ok_or_else(|| bad("aggregate")))
                    .collect::<Result<BTreeSet<_>, _>>()?,
            },
            "put_consumer" => {
                let r = c.get("row").ok_or_else(|| bad("row"))?;
                let mut allocs = AllocationMap::new();
                for (provider, amounts) in
                    c.get("allocations").and_then(Value::as_object).ok_or_else(|| bad("allocations"))?
                {
                    let provider = Uuid::parse_str(provider).map_err(|_| bad("allocation provider"))?;
                    let mut per_class = berth_model::ClassAmounts::new();
                    for (class, amount) in amounts.as_object().ok_or_else(|| bad("amounts"))? {
                        per_class.insert(class.clone(), amount.as_i64().ok_or_else(|| bad("amount"))?);
                    }
                    allocs.insert(provider, per_class);
                }
                Change::PutConsumer {
                    row: ConsumerRow {
                        uuid: get_uuid(r, "uuid")?,
                        project_id: get_str(r, "project_id")?.to_owned(),
                        user_id: get_str(r, "user_id")?.to_owned(),
                        generation: get_i64(r, "generation")?,
                        consumer_type: r.get("consumer_type").and_then(Value::as_str).map(str::to_owned),
                        created_at: get_i64(r, "created_at")?,
                        updated_at: get_i64(r, "updated_at")?,
                    },
                    expected_generation: opt_i64(c, "expected"),
                    allocations: allocs,
                }
            }
            "delete_consumer" => {
                Change::DeleteConsumer { uuid: get_uuid(c, "uuid")?, expected_generation: get_i64(c, "expected")? }
            }
            "put_class" => Change::PutResourceClass {
                id: get_i64(c, "id")?,
                name: get_str(c, "name")?.to_owned(),
                created_at: get_i64(c, "created_at")?,
                updated_at: opt_i64(c, "updated_at"),
            },
            "delete_class" => Change::DeleteResourceClass { name: get_str(c, "name")?.to_owned() },
            "put_trait" => Change::PutTrait {
                id: get_i64(c, "id")?,
                name: get_str(c, "name")?.to_owned(),
                created_at: get_i64(c, "created_at")?,
            },
            "delete_trait" => Change::DeleteTrait { name: get_str(c, "name")?.to_owned() },
            other => return Err(DecodeError(format!("unknown change type {other}"))),
        };
        set.changes.push(WorldChange::Placement(change));
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use berth_model::ChangeSet;

    use super::*;

    #[test]
    fn round_trip_every_change_kind() {
        let p = Uuid::new_v4();
        let c = Uuid::new_v4();
        let mut inventories = BTreeMap::new();
        inventories.insert(
            "VCPU".to_owned(),
            Inventory { total: 8, reserved: 1, min_unit: 1, max_unit: 8, step_size: 1, allocation_ratio: 16.0 },
        );
        let mut allocs = AllocationMap::new();
        allocs.entry(p).or_default().insert("VCPU".to_owned(), 2);
        let set = ChangeSet {
            changes: vec![
                Change::PutProvider {
                    row: ProviderRow {
                        id: 3,
                        uuid: p,
                        name: "n".into(),
                        generation: 2,
                        parent: None,
                        root: p,
                        created_at: 10,
                        updated_at: 11,
                    },
                    expected_generation: Some(1),
                },
                Change::SetInventories { provider: p, inventories },
                Change::SetProviderTraits { provider: p, traits: ["HW_CPU_X86_AVX2".to_owned()].into() },
                Change::SetProviderAggregates { provider: p, aggregates: [Uuid::new_v4()].into() },
                Change::PutConsumer {
                    row: ConsumerRow {
                        uuid: c,
                        project_id: "p".into(),
                        user_id: "u".into(),
                        generation: 1,
                        consumer_type: Some("INSTANCE".into()),
                        created_at: 1,
                        updated_at: 2,
                    },
                    expected_generation: None,
                    allocations: allocs,
                },
                Change::DeleteConsumer { uuid: c, expected_generation: 1 },
                Change::PutResourceClass { id: 10000, name: "CUSTOM_X".into(), created_at: 5, updated_at: Some(6) },
                Change::DeleteResourceClass { name: "CUSTOM_X".into() },
                Change::PutTrait { id: 400, name: "CUSTOM_T".into(), created_at: 7 },
                Change::DeleteTrait { name: "CUSTOM_T".into() },
                Change::DeleteProvider { uuid: p, expected_generation: 2 },
            ],
        };
        let mut world = WorldChangeSet::from(set);
        world.compute(berth_compute_model::ComputeChange::DeleteFlavor("f".into()));
        assert_eq!(decode(&encode(&world)).unwrap(), world);

        // The directly written kinds: escaping, a parent, no consumer type,
        // allocations against two providers in their order, and a compute
        // row with a body between them.
        let child = Uuid::new_v4();
        let mut allocs = AllocationMap::new();
        allocs.entry(child).or_default().insert("VCPU".to_owned(), 1);
        allocs.entry(child).or_default().insert("MEMORY_MB".to_owned(), 512);
        allocs.entry(p).or_default().insert("CUSTOM_\"Q\"".to_owned(), 3);
        let mut world = WorldChangeSet::from(ChangeSet {
            changes: vec![
                Change::PutProvider {
                    row: ProviderRow {
                        id: 4,
                        uuid: child,
                        name: "tab\there \"quoted\" \\ ünïcode".into(),
                        generation: 0,
                        parent: Some(p),
                        root: p,
                        created_at: 12,
                        updated_at: 13,
                    },
                    expected_generation: None,
                },
                Change::PutConsumer {
                    row: ConsumerRow {
                        uuid: c,
                        project_id: "p\u{1}".into(),
                        user_id: "u/\"".into(),
                        generation: 4,
                        consumer_type: None,
                        created_at: 1,
                        updated_at: 2,
                    },
                    expected_generation: Some(3),
                    allocations: allocs,
                },
            ],
        });
        world.compute(berth_compute_model::ComputeChange::PutQuota {
            project_id: "pr\"oj".into(),
            user_id: String::new(),
            resource: "cores".into(),
            limit: 7,
        });
        let mut consumers = world.changes.clone();
        consumers.swap(1, 2);
        world.changes = consumers;
        let decoded = decode(&encode(&world)).unwrap();
        assert_eq!(decoded, world);
        let Some(WorldChange::Placement(Change::PutConsumer { allocations, .. })) = decoded.changes.get(2) else {
            panic!("consumer third: {decoded:?}")
        };
        assert_eq!(allocations.keys().copied().collect::<Vec<_>>(), vec![child, p], "allocation order kept");
        assert!(decode("{\"v\": 99, \"changes\": []}").is_err());
    }
}
