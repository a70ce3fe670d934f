//! Blazar's requirement language, evaluated: [`Query`] (`hypervisor_properties`
//! and `resource_properties`, with berth's `or` and number literals),
//! [`Prop`] (hypervisor fields compare as numbers, extra capabilities as
//! strings, as in Blazar) and the hypervisor fields of an enrolled host.
//! Parsing the JSON text is the runtime's (`berth-reservations`).

use berth_compute_model::lease::ReservableHost;
use berth_compute_model::World;

use crate::capacity;

/// Comparison operators of Blazar's query language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
}

impl Op {
    /// From its text.
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "==" | "=" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            ">" => Op::Gt,
            "<=" => Op::Le,
            ">=" => Op::Ge,
            _ => return None,
        })
    }
}

/// A parsed requirement (`["==", "$vcpus", "8"]`, `["and", q1, q2]`, and
/// as extensions `["or", …]` and JSON number literals).
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// `key op "value"`: a string literal, compared as Blazar does (see
    /// [`Prop`]).
    Cmp {
        /// Operator.
        op: Op,
        /// Property (without `$`).
        key: String,
        /// Value as given.
        value: String,
    },
    /// `key op 9`: a JSON number literal (berth's extension; Blazar refuses
    /// it), compared numerically; a value that is not a number matches
    /// nothing.
    Num {
        /// Operator.
        op: Op,
        /// Property (without `$`).
        key: String,
        /// The number.
        value: f64,
    },
    /// All of.
    And(Vec<Query>),
    /// Any of.
    Or(Vec<Query>),
}

/// A property's value as Blazar holds it: hypervisor fields are columns,
/// integer ones compared as numbers by SQL (`["<", "$vcpus", "10"]` holds
/// for 8); extra capabilities are text, compared as strings by Python
/// (`["<", "$level", "9"]` holds for "10" and "2", not for "9").
#[derive(Debug, Clone, PartialEq)]
pub enum Prop {
    /// An integer column.
    Int(i64),
    /// Text.
    Text(String),
}

fn holds(op: Op, ord: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering;
    match op {
        Op::Eq => ord == Ordering::Equal,
        Op::Ne => ord != Ordering::Equal,
        Op::Lt => ord == Ordering::Less,
        Op::Gt => ord == Ordering::Greater,
        Op::Le => ord != Ordering::Greater,
        Op::Ge => ord != Ordering::Less,
    }
}

fn compare_text(op: Op, have: &Prop, want: &str) -> bool {
    match have {
        Prop::Int(n) => match want.trim().parse::<f64>() {
            Ok(w) => (*n as f64).partial_cmp(&w).is_some_and(|o| holds(op, o)),
            Err(_) => holds(op, n.to_string().as_str().cmp(want)),
        },
        Prop::Text(t) => holds(op, t.as_str().cmp(want)),
    }
}

fn compare_number(op: Op, have: &Prop, want: f64) -> bool {
    let have = match have {
        Prop::Int(n) => *n as f64,
        Prop::Text(t) => match t.trim().parse::<f64>() {
            Ok(v) => v,
            Err(_) => return false,
        },
    };
    have.partial_cmp(&want).is_some_and(|o| holds(op, o))
}

impl Query {
    /// True when `lookup` (property → value) satisfies the query. A missing
    /// property satisfies nothing.
    pub fn matches(&self, lookup: &dyn Fn(&str) -> Option<Prop>) -> bool {
        match self {
            Query::Cmp { op, key, value } => lookup(key).is_some_and(|have| compare_text(*op, &have, value)),
            Query::Num { op, key, value } => lookup(key).is_some_and(|have| compare_number(*op, &have, *value)),
            Query::And(list) => list.iter().all(|q| q.matches(lookup)),
            Query::Or(list) => list.iter().any(|q| q.matches(lookup)),
        }
    }

    /// The property names used.
    pub fn keys(&self, out: &mut Vec<String>) {
        match self {
            Query::Cmp { key, .. } | Query::Num { key, .. } => out.push(key.clone()),
            Query::And(list) | Query::Or(list) => list.iter().for_each(|q| q.keys(out)),
        }
    }
}

/// A hypervisor field of an enrolled host, for `hypervisor_properties`.
pub fn hypervisor_field(host: &ReservableHost, key: &str) -> Option<Prop> {
    Some(match key {
        "vcpus" => Prop::Int(host.vcpus),
        "memory_mb" => Prop::Int(host.memory_mb),
        "local_gb" => Prop::Int(host.local_gb),
        "hypervisor_type" => Prop::Text(host.hypervisor_type.clone()),
        "hypervisor_version" => Prop::Int(host.hypervisor_version),
        "hypervisor_hostname" => Prop::Text(host.hypervisor_hostname.clone()),
        "service_name" => Prop::Text(host.service_name.clone()),
        "cpu_info" => Prop::Text(host.cpu_info.clone()),
        "availability_zone" => Prop::Text(host.availability_zone.clone()),
        _ => return None,
    })
}

/// [`hypervisor_field`] with `vcpus`, `memory_mb` and `local_gb` as the
/// host has them now ([`capacity::host_capacity`]).
pub(crate) fn hypervisor_field_now(world: &World, host: &ReservableHost, key: &str) -> Option<Prop> {
    let now = || capacity::host_capacity(world, host);
    Some(match key {
        "vcpus" => Prop::Int(now().vcpus),
        "memory_mb" => Prop::Int(now().memory_mb),
        "local_gb" => Prop::Int(now().local_gb),
        _ => return hypervisor_field(host, key),
    })
}
