//! Read queries over the state: `GET /resource_providers` filtering.
//!
//! Filters are applied in upstream's order, including its early exits: an
//! `in_tree` provider that does not exist, or required traits / aggregates
//! no provider has, give an empty list before later filters are looked at
//! (so an unknown resource class is only reported when reached).

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::{ModelError, Provider, Result, State};

/// The filters of `GET /resource_providers`, already parsed and checked
/// for format by the API layer. Empty fields do not filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Exact uuid.
    pub uuid: Option<Uuid>,
    /// Only providers in the same tree as this provider (1.14).
    pub in_tree: Option<Uuid>,
    /// Each set: the provider must be in at least one of its aggregates;
    /// all sets must hold (1.3, repeated 1.24).
    pub member_of: Vec<BTreeSet<Uuid>>,
    /// The provider must be in none of these aggregates (1.32).
    pub forbidden_aggregates: BTreeSet<Uuid>,
    /// Each set: the provider must have at least one of its traits; all
    /// sets must hold (1.18, any-of 1.39).
    pub required_traits: Vec<BTreeSet<String>>,
    /// The provider must have none of these traits (1.22).
    pub forbidden_traits: BTreeSet<String>,
    /// Resource class and amount pairs the provider must have capacity
    /// for (1.4), in request order.
    pub resources: Vec<(String, i64)>,
}

/// Can `provider` take `amount` more of `class`? Upstream's capacity
/// clause: it has inventory of the class, `used + amount <= (total -
/// reserved) * allocation_ratio` (compared without truncation),
/// `min_unit <= amount <= max_unit` and `amount % step_size == 0`.
pub fn has_capacity(provider: &Provider, class: &str, amount: i64) -> bool {
    let Some(inventory) = provider.inventories.get(class) else { return false };
    let capacity = (inventory.total - inventory.reserved) as f64 * inventory.allocation_ratio;
    (provider.used(class) + amount) as f64 <= capacity
        && inventory.min_unit <= amount
        && inventory.max_unit >= amount
        && inventory.step_size > 0
        && amount % inventory.step_size == 0
}

fn unknown_trait(name: &str) -> ModelError {
    ModelError::Invalid(format!("Invalid trait(s) in \"required\" parameter: No such trait(s): {name}."))
}

/// Providers matching `filter`, in list (creation) order.
pub fn list_providers<'a>(state: &'a State, filter: &ProviderFilter) -> Result<Vec<&'a Provider>> {
    let mut candidates: Vec<&Provider> = state
        .providers_in_order()
        .filter(|p| filter.name.as_ref().is_none_or(|name| &p.row.name == name))
        .filter(|p| filter.uuid.is_none_or(|uuid| p.row.uuid == uuid))
        .collect();
    if let Some(in_tree) = filter.in_tree {
        let Some(tree_member) = state.provider(&in_tree) else { return Ok(Vec::new()) };
        let root = tree_member.row.root;
        candidates.retain(|p| p.row.root == root);
    }
    if !filter.required_traits.is_empty() {
        for any_of in &filter.required_traits {
            if let Some(name) = any_of.iter().find(|name| !state.traits.contains_key(name.as_str())) {
                return Err(unknown_trait(name));
            }
        }
        candidates.retain(|p| filter.required_traits.iter().all(|any_of| any_of.iter().any(|t| p.traits.contains(t))));
        if candidates.is_empty() {
            return Ok(candidates);
        }
    }
    if !filter.forbidden_traits.is_empty() {
        if let Some(name) = filter.forbidden_traits.iter().find(|name| !state.traits.contains_key(name.as_str())) {
            return Err(unknown_trait(name));
        }
        candidates.retain(|p| filter.forbidden_traits.iter().all(|t| !p.traits.contains(t)));
    }
    if !filter.member_of.is_empty() {
        candidates.retain(|p| filter.member_of.iter().all(|any_of| any_of.iter().any(|a| p.aggregates.contains(a))));
        if candidates.is_empty() {
            return Ok(candidates);
        }
    }
    if !filter.forbidden_aggregates.is_empty() {
        candidates.retain(|p| filter.forbidden_aggregates.iter().all(|a| !p.aggregates.contains(a)));
    }
    for (class, amount) in &filter.resources {
        if !state.resource_classes.contains_key(class.as_str()) {
            return Err(ModelError::Invalid(format!(
                "Invalid resource class in resources parameter: No such resource class {class}."
            )));
        }
        candidates.retain(|p| has_capacity(p, class, *amount));
    }
    Ok(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventories::{inventory_with_defaults, plan_set_inventories, ReservedRule};
    use crate::providers::plan_create_provider;
    use crate::{Change, ChangeSet};
    use std::collections::BTreeMap;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn state() -> State {
        let mut state = State::with_standard_data(1);
        for (n, name, parent) in [(1, "a", None), (2, "b", Some(u(1))), (3, "c", None)] {
            let (set, _) = plan_create_provider(&state, u(n), name, parent, 1).expect("create");
            state.apply(&set);
        }
        let mut set = ChangeSet::new();
        set.push(Change::SetProviderTraits { provider: u(1), traits: ["HW_CPU_X86_AVX".to_owned()].into() });
        set.push(Change::SetProviderTraits { provider: u(3), traits: ["HW_CPU_X86_SSE".to_owned()].into() });
        set.push(Change::SetProviderAggregates { provider: u(2), aggregates: [u(50)].into() });
        state.apply(&set);
        let invs = BTreeMap::from([(
            "VCPU".to_owned(),
            inventory_with_defaults(8, Some(0), None, Some(4), Some(2), Some(1.0)),
        )]);
        let (set, _) = plan_set_inventories(&state, u(3), 0, invs, ReservedRule::LessThanTotal, 1).expect("inv");
        state.apply(&set);
        state
    }

    fn uuids(state: &State, filter: &ProviderFilter) -> Vec<u128> {
        list_providers(state, filter).expect("list").iter().map(|p| p.row.uuid.as_u128()).collect()
    }

    #[test]
    fn tree_traits_and_aggregates() {
        let state = state();
        assert_eq!(uuids(&state, &ProviderFilter::default()), vec![1, 2, 3]);
        assert_eq!(uuids(&state, &ProviderFilter { in_tree: Some(u(2)), ..Default::default() }), vec![1, 2]);
        assert!(uuids(&state, &ProviderFilter { in_tree: Some(u(9)), ..Default::default() }).is_empty());
        let any_of = ProviderFilter {
            required_traits: vec![["HW_CPU_X86_AVX".to_owned(), "HW_CPU_X86_SSE".to_owned()].into()],
            ..Default::default()
        };
        assert_eq!(uuids(&state, &any_of), vec![1, 3]);
        let forbidden = ProviderFilter { forbidden_traits: ["HW_CPU_X86_AVX".to_owned()].into(), ..Default::default() };
        assert_eq!(uuids(&state, &forbidden), vec![2, 3]);
        let unknown = ProviderFilter { required_traits: vec![["CUSTOM_NOPE".to_owned()].into()], ..Default::default() };
        assert!(list_providers(&state, &unknown).is_err());
        assert_eq!(uuids(&state, &ProviderFilter { member_of: vec![[u(50)].into()], ..Default::default() }), vec![2]);
        let not_in = ProviderFilter { forbidden_aggregates: [u(50)].into(), ..Default::default() };
        assert_eq!(uuids(&state, &not_in), vec![1, 3]);
    }

    #[test]
    fn resources_respect_capacity_and_units() {
        let state = state();
        let want = |amount| ProviderFilter { resources: vec![("VCPU".to_owned(), amount)], ..Default::default() };
        assert_eq!(uuids(&state, &want(4)), vec![3]);
        assert!(uuids(&state, &want(3)).is_empty(), "step size 2");
        assert!(uuids(&state, &want(6)).is_empty(), "max_unit 4");
        let bad = ProviderFilter { resources: vec![("NOPE".to_owned(), 1)], ..Default::default() };
        assert!(list_providers(&state, &bad).is_err());
    }
}
