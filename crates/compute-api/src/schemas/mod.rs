//! Request-body JSON schemas, per microversion, mirroring Nova 34's
//! `api/openstack/compute/schemas/*.py` (Glance's image schema lives in
//! `berth-image-api`).
//!
//! They are written for berth's validator (`berth_http::schema`: draft-4
//! keywords plus `format: uuid`, patterns in Rust `regex` syntax). Where
//! Nova relies on something that validator lacks, the schema says the same
//! thing another way, or a little less; the tests apply exactly these
//! rewrites to Nova's own schemas and require equality:
//!
//! 1. `format: name` (printable, no leading or trailing whitespace) becomes
//!    the pattern [`NAME`]; `format: name_with_leading_trailing_spaces`
//!    becomes [`NAME_WITH_SPACES`]; `format: az_name` (also no `:`) becomes
//!    [`AZ_NAME`]. Nova's "printable" is the Unicode categories L, M, N,
//!    P, S and Zs; the patterns exclude the control characters
//!    (`U+0000`–`U+001F`, `U+007F`–`U+009F`) and the line and paragraph
//!    separators only, so other format and unassigned characters pass.
//! 2. Nova's printable-characters pattern for descriptions (a character
//!    class listing every printable code point) becomes [`PRINTABLE_TEXT`],
//!    with the same simplification.
//! 3. `format: ipv4` / `ipv6` become the patterns [`IPV4`] / [`IPV6`] (the
//!    IPv6 one checks the alphabet and a colon, not the full grammar: the
//!    server handlers parse `accessIPv4`/`accessIPv6` fully after it), and
//!    `oneOf: [{format: ipv4}, {format: ipv6}]` becomes the pattern
//!    [`IP_ADDRESS`] (with formats ignored, that `oneOf` would reject
//!    everything).
//! 4. `format: base64` (on `user_data`) is dropped: the handler decodes it.
//! 5. The flavor id pattern's look-around (`^(?! )[a-zA-Z0-9. _-]+(?<! )$`)
//!    becomes the equivalent [`FLAVOR_ID`].
//! 6. `exclusiveMinimum: 0` (on `rxtx_factor`, unused by berth) is dropped.
//! 7. `prefixItems: [S]` with `additionalItems: false` (a one-element
//!    `policies` list that also has `maxItems: 1`) becomes `items: S`.
//!
//! Every other pattern is Nova's own: Rust's `regex` reads them the same
//! way (the tests compile each one; the validator would silently skip a
//! pattern it cannot compile).

use serde_json::{json, Value};

pub mod aggregates;
pub mod events;
pub mod flavors;
pub mod hosts;
pub mod keypairs;
pub mod quotas;
pub mod server_groups;
pub mod servers;
pub mod services;

/// Characters Nova counts as printable, approximately (see the module doc):
/// anything but control characters and line/paragraph separators.
macro_rules! printable {
    () => {
        r"\x00-\x1F\x7F-\x9F\x{2028}\x{2029}"
    };
}

/// Nova's `format: name`: printable, not starting or ending with
/// whitespace.
pub const NAME: &str = concat!(r"^[^\s", printable!(), r"](?:[^", printable!(), r"]*[^\s", printable!(), r"])?$");
/// Nova's `format: name_with_leading_trailing_spaces`: printable, with at
/// least one character that is not whitespace.
pub const NAME_WITH_SPACES: &str = concat!(r"^[^", printable!(), r"]*[^\s", printable!(), r"][^", printable!(), r"]*$");
/// Nova's `format: az_name`: a [`NAME`] without `:`.
pub const AZ_NAME: &str = concat!(r"^[^\s:", printable!(), r"](?:[^:", printable!(), r"]*[^\s:", printable!(), r"])?$");
/// Nova's description pattern: printable characters only (no newlines).
pub const PRINTABLE_TEXT: &str = concat!(r"^[^", printable!(), r"]*$");
/// A dotted-quad IPv4 address.
pub const IPV4: &str =
    r"^(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}$";
/// An IPv6 address, loosely: hex digits, colons and dots, with a colon.
pub const IPV6: &str = r"^[0-9a-fA-F.]*:[0-9a-fA-F:.]*$";
/// Either an [`IPV4`] or an [`IPV6`] address.
pub const IP_ADDRESS: &str = r"^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}|[0-9a-fA-F.]*:[0-9a-fA-F:.]*)$";
/// A flavor id: letters, digits, `.`, `_`, `-` and inner spaces.
pub const FLAVOR_ID: &str = r"^[a-zA-Z0-9._-](?:[a-zA-Z0-9. _-]*[a-zA-Z0-9._-])?$";
/// A metadata (or extra spec) key (Nova's pattern; the `-` after `0-9` is
/// a literal in Rust's `regex` too).
pub const METADATA_KEY: &str = "^[a-zA-Z0-9-_:. ]{1,255}$";

/// Nova's `parameter_types.boolean`: a JSON boolean or one of the strings
/// oslo's `bool_from_string` understands.
pub fn boolean() -> Value {
    json!({
        "type": ["boolean", "string"],
        "enum": [
            true, "True", "TRUE", "true", "1", "ON", "On", "on", "YES", "Yes", "yes",
            false, "False", "FALSE", "false", "0", "OFF", "Off", "off", "NO", "No", "no",
        ],
    })
}

/// Nova's `parameter_types.name`.
pub fn name() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": NAME})
}

/// Nova's `parameter_types.name_with_leading_trailing_spaces`.
pub fn name_with_spaces() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": NAME_WITH_SPACES})
}

/// Nova's `parameter_types.description` (nullable, at most 255 printable
/// characters).
pub fn description() -> Value {
    json!({"type": ["string", "null"], "minLength": 0, "maxLength": 255, "pattern": PRINTABLE_TEXT})
}

/// Nova's `parameter_types.uuid`.
pub fn uuid() -> Value {
    json!({"type": "string", "format": "uuid"})
}

/// Nova's `parameter_types.hostname` (a host or node name).
pub fn hostname() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9-._]*$"})
}

/// Nova's `parameter_types.metadata`: string keys and values up to 255.
pub fn metadata() -> Value {
    json!({
        "type": "object",
        "patternProperties": {METADATA_KEY: {"type": "string", "maxLength": 255}},
        "additionalProperties": false,
    })
}

/// Nova's `parameter_types.positive_integer`: an integer or digit string,
/// at least 1.
pub fn positive_integer() -> Value {
    json!({"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 1, "minLength": 1})
}

/// Nova's `parameter_types.non_negative_integer` bounded by the database's
/// 32-bit integers (`minimum` is 0, or 1 for `positive`).
fn db_integer(minimum: i64) -> Value {
    json!({"type": ["integer", "string"], "pattern": "^[0-9]+$", "minimum": minimum, "maximum": 2_147_483_647})
}

/// Nova's device tag (`parameter_types.tag`).
pub fn tag() -> Value {
    json!({"type": "string", "pattern": "^[^,/]*$", "minLength": 1, "maxLength": 60})
}

/// `{"type": "object", "properties": {key: body}, "required": [key],
/// "additionalProperties": false}`: a body that is one named object.
fn envelope(key: &str, body: Value) -> Value {
    json!({
        "type": "object",
        "properties": {key: body},
        "required": [key],
        "additionalProperties": false,
    })
}
