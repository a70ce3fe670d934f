//! `/os-keypairs` bodies (Nova's `views/keypairs.py`: the fields of each
//! answer, in Nova's order).

use serde_json::{json, Map, Value};

use berth_compute_model::KeyPair;

use super::{list_body, strtime, wrap};
use crate::ComputeVersion;

/// The answer to a create: `private_key` first when one was generated,
/// then `type` (2.2), `name`, `public_key`, `fingerprint`, `user_id`.
pub fn create(version: ComputeVersion, key_pair: &KeyPair, private_key: Option<&str>) -> Value {
    let mut body = Map::new();
    if let Some(private_key) = private_key {
        body.insert("private_key".into(), json!(private_key));
    }
    if version.at_least(2) {
        body.insert("type".into(), json!(key_pair.key_type.as_str()));
    }
    body.insert("name".into(), json!(key_pair.name));
    body.insert("public_key".into(), json!(key_pair.public_key));
    body.insert("fingerprint".into(), json!(key_pair.fingerprint));
    body.insert("user_id".into(), json!(key_pair.user_id));
    wrap("keypair", Value::Object(body))
}

/// One listed key pair: `name`, `public_key`, `fingerprint`, and `type`
/// from 2.2.
fn item(version: ComputeVersion, key_pair: &KeyPair) -> Value {
    let mut body = Map::new();
    body.insert("name".into(), json!(key_pair.name));
    body.insert("public_key".into(), json!(key_pair.public_key));
    body.insert("fingerprint".into(), json!(key_pair.fingerprint));
    if version.at_least(2) {
        body.insert("type".into(), json!(key_pair.key_type.as_str()));
    }
    wrap("keypair", Value::Object(body))
}

/// `GET /os-keypairs`: each key pair wrapped in `{"keypair": …}`, and
/// `keypairs_links` when `next` is given (2.35).
pub fn index(version: ComputeVersion, key_pairs: &[&KeyPair], next: Option<Value>) -> Value {
    list_body("keypairs", key_pairs.iter().map(|k| item(version, k)).collect(), "keypairs_links", next)
}

/// `GET /os-keypairs/{name}`: the create fields (no private key) plus
/// Nova's soft-delete columns (never set), `created_at` and `id`, and
/// `type` from 2.2.
pub fn show(version: ComputeVersion, key_pair: &KeyPair) -> Value {
    let mut body = Map::new();
    body.insert("name".into(), json!(key_pair.name));
    body.insert("public_key".into(), json!(key_pair.public_key));
    body.insert("fingerprint".into(), json!(key_pair.fingerprint));
    body.insert("user_id".into(), json!(key_pair.user_id));
    body.insert("created_at".into(), json!(strtime(key_pair.created_at)));
    body.insert("deleted".into(), json!(false));
    body.insert("deleted_at".into(), Value::Null);
    body.insert("id".into(), json!(key_pair.id));
    body.insert("updated_at".into(), Value::Null);
    if version.at_least(2) {
        body.insert("type".into(), json!(key_pair.key_type.as_str()));
    }
    wrap("keypair", Value::Object(body))
}
