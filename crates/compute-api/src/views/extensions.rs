//! `/extensions` bodies: Nova's fixed extension list
//! (`extension_info.py` `EXTENSION_LIST`, copied into `extensions.json`),
//! kept for clients that still ask; extensions themselves are long gone.

use std::sync::OnceLock;

use serde_json::Value;

use super::wrap;

fn all() -> &'static [Value] {
    static LIST: OnceLock<Vec<Value>> = OnceLock::new();
    LIST.get_or_init(|| serde_json::from_str(include_str!("extensions.json")).unwrap_or_default())
}

/// The `GET /extensions` body.
pub fn index() -> Value {
    wrap("extensions", Value::Array(all().to_vec()))
}

/// The `GET /extensions/{alias}` body, `None` for an unknown alias.
pub fn show(alias: &str) -> Option<Value> {
    all().iter().find(|e| e["alias"] == alias).map(|e| wrap("extension", e.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_novas() {
        assert_eq!(all().len(), 99);
        assert_eq!(index()["extensions"][0]["alias"], "NMN");
        assert_eq!(show("os-consoles").expect("known")["extension"]["name"], "Consoles");
        assert!(show("nope").is_none());
    }
}
