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
pub(crate) fn encode(set: &WorldChangeSet) -> String {
    let changes: Vec<Value> = set
        .changes
        .iter()
        .map(|change| match change {
            WorldChange::Placement(change) => placement_change(change),
            WorldChange::Compute(change) => json!({"t": "compute", "c": berth_store::json::change(change)}),
        })
        .collect();
    json!({"v": FORMAT_VERSION, "changes": changes}).to_string()
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
        assert!(decode("{\"v\": 99, \"changes\": []}").is_err());
    }
}
