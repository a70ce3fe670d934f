//! Flavor extra-spec validation (Nova's `api/validation/extra_specs`), for
//! the keys the scheduler reads: `resources[N]:RC`, `trait[N]:TRAIT`,
//! `group_policy` and the CPU policies. Other keys are stored as given.

use std::collections::HashSet;
use std::sync::OnceLock;

fn standard_traits() -> &'static HashSet<&'static str> {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| berth_model::standard_traits().collect())
}

fn standard_resource_classes() -> &'static HashSet<&'static str> {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| berth_model::standard_resource_classes().collect())
}

/// A granular group suffix: empty, or 1–64 of `[a-zA-Z0-9_-]`.
pub fn valid_group_suffix(suffix: &str) -> bool {
    suffix.len() <= 64 && suffix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn custom_name(name: &str) -> bool {
    name.strip_prefix("CUSTOM_").is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// A parsed `resources[S]:RC` or `trait[S]:NAME` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GranularKey<'a> {
    /// `resources{suffix}:{class}`.
    Resource {
        /// Group suffix (empty: unsuffixed group).
        suffix: &'a str,
        /// Resource class.
        class: &'a str,
    },
    /// `trait{suffix}:{name}`.
    Trait {
        /// Group suffix.
        suffix: &'a str,
        /// Trait name.
        name: &'a str,
    },
}

/// Parse `resources[S]:X` / `trait[S]:X` (Nova's `XS_KEYPAT`).
pub fn parse_granular(key: &str) -> Option<GranularKey<'_>> {
    let (namespace, name) = key.split_once(':')?;
    if let Some(suffix) = namespace.strip_prefix("resources") {
        if valid_group_suffix(suffix) {
            return Some(GranularKey::Resource { suffix, class: name });
        }
    }
    if let Some(suffix) = namespace.strip_prefix("trait") {
        if valid_group_suffix(suffix) {
            return Some(GranularKey::Trait { suffix, name });
        }
    }
    None
}

fn not_recognised(name: &str) -> String {
    format!("Validation failed; extra spec '{name}' does not appear to be a valid extra spec.")
}

fn one_of(value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(format!("Validation failed; '{value}' is not one of: {}.", allowed.join(", ")))
    }
}

/// Validate one extra spec as Nova does (from microversion 2.86, when the
/// request does not opt out). Returns Nova's message on failure.
pub fn validate(name: &str, value: &str) -> Result<(), String> {
    match name {
        "group_policy" => return one_of(value, &["isolate", "none"]),
        "hw:cpu_policy" => return one_of(value, &["dedicated", "shared", "mixed"]),
        "hw:cpu_thread_policy" => return one_of(value, &["prefer", "isolate", "require"]),
        "hw:emulator_threads_policy" => return one_of(value, &["share", "isolate"]),
        _ => {}
    }
    match parse_granular(name) {
        Some(GranularKey::Resource { class, .. }) => {
            if !(standard_resource_classes().contains(class) || custom_name(class)) {
                return Err(not_recognised(name));
            }
            value
                .trim()
                .parse::<i64>()
                .map(|_| ())
                .map_err(|_| format!("Validation failed; '{value}' is not a valid integer value."))
        }
        Some(GranularKey::Trait { name: trait_name, .. }) => {
            if !(standard_traits().contains(trait_name) || custom_name(trait_name)) {
                return Err(not_recognised(name));
            }
            one_of(value, &["required", "forbidden"])
        }
        None => {
            // A `resources...:`/`trait...:` namespace with a bad suffix is a
            // recognised namespace used wrongly.
            let namespace = name.split_once(':').map(|(ns, _)| ns);
            if namespace.is_some_and(|ns| ns.starts_with("resources") || ns.starts_with("trait")) {
                return Err(not_recognised(name));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_like_nova() {
        assert!(validate("resources:VCPU", "2").is_ok());
        assert!(validate("resources1:CUSTOM_MAGIC", "0").is_ok());
        assert!(validate("resources_ABC:DISK_GB", "10").is_ok());
        assert_eq!(
            validate("resources:VCPU", "two"),
            Err("Validation failed; 'two' is not a valid integer value.".into())
        );
        assert_eq!(
            validate("resources:NOT_A_CLASS", "1"),
            Err("Validation failed; extra spec 'resources:NOT_A_CLASS' does not appear to be a valid extra spec."
                .into())
        );
        assert!(validate("trait:HW_CPU_X86_AVX2", "required").is_ok());
        assert!(validate("trait2:CUSTOM_GOLD", "forbidden").is_ok());
        assert_eq!(
            validate("trait:HW_CPU_X86_AVX2", "yes"),
            Err("Validation failed; 'yes' is not one of: required, forbidden.".into())
        );
        assert!(validate("trait:NO_SUCH_TRAIT", "required").is_err());
        assert!(validate("group_policy", "isolate").is_ok());
        assert!(validate("group_policy", "sometimes").is_err());
        assert!(validate("hw:cpu_policy", "dedicated").is_ok());
        assert!(validate("hw:cpu_policy", "pinned").is_err());
        assert!(validate("hw:numa_nodes", "2").is_ok(), "other keys are stored as given");
        assert!(validate("aggregate_instance_extra_specs:ssd", "true").is_ok());
        assert!(validate("plain", "anything").is_ok());
        assert!(validate("resources!:VCPU", "1").is_err(), "bad group suffix");
    }

    #[test]
    fn parses_granular_keys() {
        assert_eq!(parse_granular("resources:VCPU"), Some(GranularKey::Resource { suffix: "", class: "VCPU" }));
        assert_eq!(parse_granular("trait1:FOO"), Some(GranularKey::Trait { suffix: "1", name: "FOO" }));
        assert_eq!(parse_granular("hw:cpu_policy"), None);
    }
}
