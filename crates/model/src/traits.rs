//! Traits: listing with upstream's filters, custom trait create/delete, and
//! the traits of one provider (`/resource_providers/{uuid}/traits`).

use std::collections::BTreeSet;

use crate::aggregates::find_provider;
use crate::{Change, ChangeSet, ModelError, Result, State, Timestamp, Trait};

/// Prefix every custom trait name carries.
pub const CUSTOM_PREFIX: &str = "CUSTOM_";

/// True when `name` is a valid custom trait name (`^CUSTOM_[A-Z0-9_]+$`,
/// 1–255 characters).
pub fn is_valid_custom_name(name: &str) -> bool {
    name.len() <= 255
        && name.strip_prefix(CUSTOM_PREFIX).is_some_and(|rest| {
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
}

/// Filters of `GET /traits`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraitFilter {
    /// `name=in:A,B`: only these names.
    pub name_in: Option<Vec<String>>,
    /// `name=startswith:X`: only names with this prefix.
    pub prefix: Option<String>,
    /// `associated=true|false`: only traits some provider has (or none has).
    pub associated: Option<bool>,
}

/// Traits matching `filter`, in id order (upstream's table order).
pub fn list<'a>(state: &'a State, filter: &TraitFilter) -> Vec<&'a Trait> {
    let associated: Option<BTreeSet<&str>> =
        filter.associated.map(|_| state.providers.values().flat_map(|p| p.traits.iter().map(String::as_str)).collect());
    let mut out: Vec<&Trait> = state
        .traits
        .values()
        .filter(|t| filter.name_in.as_ref().is_none_or(|names| names.contains(&t.name)))
        .filter(|t| filter.prefix.as_ref().is_none_or(|p| t.name.starts_with(p.as_str())))
        .filter(|t| match (filter.associated, &associated) {
            (Some(want), Some(used)) => used.contains(t.name.as_str()) == want,
            _ => true,
        })
        .collect();
    out.sort_by_key(|t| t.id);
    out
}

/// The trait called `name`, or upstream's 404.
pub fn get<'a>(state: &'a State, name: &str) -> Result<&'a Trait> {
    state.traits.get(name).ok_or_else(|| ModelError::NotFound(format!("No such trait(s): {name}.")))
}

/// Plan `PUT /traits/{name}`: create the custom trait unless it exists.
/// Returns the trait and whether it was created (201) or already there
/// (204, empty change set).
pub fn plan_ensure(state: &State, name: &str, now: Timestamp) -> Result<(ChangeSet, (Trait, bool))> {
    if let Some(existing) = state.traits.get(name) {
        return Ok((ChangeSet::new(), (existing.clone(), false)));
    }
    if !is_valid_custom_name(name) {
        return Err(ModelError::Invalid(
            "The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix \
             \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\""
                .to_owned(),
        ));
    }
    let id = state.traits.values().map(|t| t.id).chain(std::iter::once(state.max_trait_id)).max().unwrap_or(0) + 1;
    let created = Trait { id, name: name.to_owned(), created_at: now };
    let mut set = ChangeSet::new();
    set.push(Change::PutTrait { id, name: created.name.clone(), created_at: now });
    Ok((set, (created, true)))
}

/// Plan `DELETE /traits/{name}`: 404 when unknown, 400 for a standard trait,
/// 409 while a provider has it.
pub fn plan_delete(state: &State, name: &str) -> Result<(ChangeSet, ())> {
    get(state, name)?;
    if !name.starts_with(CUSTOM_PREFIX) {
        return Err(ModelError::Invalid(format!("Cannot delete standard trait {name}.")));
    }
    if state.providers.values().any(|p| p.traits.contains(name)) {
        return Err(ModelError::Conflict(format!("The trait {name} is in use by a resource provider.")));
    }
    let mut set = ChangeSet::new();
    set.push(Change::DeleteTrait { name: name.to_owned() });
    Ok((set, ()))
}

/// The traits of provider `uuid` (in id order) and its generation.
pub fn provider_traits<'a>(state: &'a State, uuid: &str) -> Result<(Vec<&'a Trait>, i64)> {
    let provider = find_provider(state, uuid)?;
    let mut traits: Vec<&Trait> = provider.traits.iter().filter_map(|name| state.traits.get(name)).collect();
    traits.sort_by_key(|t| t.id);
    Ok((traits, provider.row.generation))
}

/// Plan replacing the traits of provider `uuid` (`PUT` with
/// `expected_generation` from the body, `DELETE` with `None`). Order of
/// checks as upstream: provider (404), generation (409), unknown traits
/// (400). The generation is bumped only when the set actually changes.
/// Returns the provider's generation after the change.
pub fn plan_set_provider_traits(
    state: &State,
    uuid: &str,
    traits: &[String],
    expected_generation: Option<i64>,
    now: Timestamp,
) -> Result<(ChangeSet, i64)> {
    let provider = find_provider(state, uuid)?;
    let current = provider.row.generation;
    if expected_generation.is_some_and(|g| g != current) {
        return Err(ModelError::GenerationConflict(
            "Resource provider's generation already changed. Please update the generation and try again.".to_owned(),
        ));
    }
    let unknown: BTreeSet<&str> =
        traits.iter().map(String::as_str).filter(|t| !state.traits.contains_key(*t)).collect();
    if !unknown.is_empty() {
        return Err(ModelError::Invalid(format!(
            "No such trait {}",
            unknown.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    let wanted: BTreeSet<String> = traits.iter().cloned().collect();
    let mut set = ChangeSet::new();
    if wanted == provider.traits {
        return Ok((set, current));
    }
    let mut row = provider.row.clone();
    row.generation = current + 1;
    row.updated_at = now;
    set.push(Change::PutProvider { row, expected_generation: Some(current) });
    set.push(Change::SetProviderTraits { provider: provider.uuid(), traits: wanted });
    Ok((set, current + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Uuid;

    fn state_with_provider() -> (State, Uuid) {
        let mut state = State::with_standard_data(1);
        let uuid = Uuid::from_u128(42);
        crate::test_support::add_root_provider(&mut state, 1, uuid, "rp");
        for name in ["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2", "CUSTOM_OTHER"] {
            let (set, _) = plan_ensure(&state, name, 3).unwrap();
            state.apply(&set);
        }
        (state, uuid)
    }

    #[test]
    fn ensure_validates_and_is_idempotent() {
        let (state, _) = state_with_provider();
        assert!(
            matches!(plan_ensure(&state, "TRAIT_X", 1), Err(ModelError::Invalid(m)) if m.starts_with("The trait is invalid."))
        );
        let (set, (_, created)) = plan_ensure(&state, "CUSTOM_TRAIT_1", 9).unwrap();
        assert!(set.is_empty() && !created);
        let (set, (t, created)) = plan_ensure(&state, "CUSTOM_NEW", 9).unwrap();
        assert!(created && !set.is_empty());
        assert!(t.id > state.traits["CUSTOM_OTHER"].id);
    }

    #[test]
    fn set_provider_traits_checks_and_bumps_only_on_change() {
        let (mut state, uuid) = state_with_provider();
        let s = uuid.to_string();
        let want = vec!["CUSTOM_TRAIT_1".to_owned(), "CUSTOM_TRAIT_2".to_owned()];
        assert!(
            matches!(plan_set_provider_traits(&state, "nope", &want, Some(0), 5), Err(ModelError::NotFound(m)) if m == "No resource provider with uuid nope found")
        );
        assert!(matches!(
            plan_set_provider_traits(&state, &s, &want, Some(5), 5),
            Err(ModelError::GenerationConflict(_))
        ));
        let bad = vec!["NON_B".to_owned(), "NON_A".to_owned(), "CUSTOM_TRAIT_1".to_owned()];
        assert!(
            matches!(plan_set_provider_traits(&state, &s, &bad, Some(0), 5), Err(ModelError::Invalid(m)) if m == "No such trait NON_A, NON_B")
        );
        let (set, generation) = plan_set_provider_traits(&state, &s, &want, Some(0), 5).unwrap();
        assert_eq!(generation, 1);
        state.apply(&set);
        let (set, generation) = plan_set_provider_traits(&state, &s, &want, Some(1), 6).unwrap();
        assert!(set.is_empty());
        assert_eq!(generation, 1);
        assert!(
            matches!(plan_delete(&state, "CUSTOM_TRAIT_1"), Err(ModelError::Conflict(m)) if m == "The trait CUSTOM_TRAIT_1 is in use by a resource provider.")
        );
        let (traits, generation) = provider_traits(&state, &s).unwrap();
        assert_eq!(generation, 1);
        assert_eq!(traits.len(), 2);
        let (set, generation) = plan_set_provider_traits(&state, &s, &[], None, 7).unwrap();
        assert_eq!(generation, 2);
        state.apply(&set);
        assert!(state.providers[&uuid].traits.is_empty());
    }

    #[test]
    fn list_filters() {
        let (mut state, uuid) = state_with_provider();
        let (set, _) =
            plan_set_provider_traits(&state, &uuid.to_string(), &["CUSTOM_OTHER".to_owned()], Some(0), 5).unwrap();
        state.apply(&set);
        let names = |f: &TraitFilter| list(&state, f).iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        let f = TraitFilter { prefix: Some("CUSTOM_TRAIT".into()), ..Default::default() };
        assert_eq!(names(&f), vec!["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]);
        let f = TraitFilter { name_in: Some(vec!["CUSTOM_TRAIT_2".into(), "X".into()]), ..Default::default() };
        assert_eq!(names(&f), vec!["CUSTOM_TRAIT_2"]);
        let f = TraitFilter { associated: Some(true), ..Default::default() };
        assert_eq!(names(&f), vec!["CUSTOM_OTHER"]);
        let f = TraitFilter { associated: Some(false), prefix: Some("CUSTOM_".into()), ..Default::default() };
        assert_eq!(names(&f), vec!["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]);
    }

    #[test]
    fn delete_rules() {
        let (state, _) = state_with_provider();
        assert!(
            matches!(plan_delete(&state, "HW_CPU_X86_SSE"), Err(ModelError::Invalid(m)) if m.contains("Cannot delete standard trait"))
        );
        assert!(matches!(plan_delete(&state, "CUSTOM_NOPE"), Err(ModelError::NotFound(_))));
        assert!(plan_delete(&state, "CUSTOM_TRAIT_1").is_ok());
    }
}
