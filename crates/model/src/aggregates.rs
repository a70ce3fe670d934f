//! Provider aggregates (`/resource_providers/{uuid}/aggregates`).
//!
//! Before microversion 1.19 a PUT replaces the aggregates without touching
//! the provider generation; from 1.19 the caller names the generation it
//! saw, which is checked and bumped (even when the set is unchanged, as
//! upstream does).

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::{Change, ChangeSet, ModelError, Provider, Result, State, Timestamp};

/// The provider whose uuid is the path segment `uuid`, or upstream's 404
/// ("No resource provider with uuid X found"), also for non-uuid text and
/// for a uuid spelt other than canonically (upstream compares the text
/// with the stored, canonical uuid).
pub fn find_provider<'a>(state: &'a State, uuid: &str) -> Result<&'a Provider> {
    Uuid::parse_str(uuid)
        .ok()
        .filter(|u| u.to_string() == uuid)
        .and_then(|u| state.providers.get(&u))
        .ok_or_else(|| ModelError::NotFound(format!("No resource provider with uuid {uuid} found")))
}

/// The aggregates of provider `uuid` (sorted) and its generation.
pub fn provider_aggregates(state: &State, uuid: &str) -> Result<(Vec<Uuid>, i64)> {
    let provider = find_provider(state, uuid)?;
    Ok((provider.aggregates.iter().copied().collect(), provider.row.generation))
}

/// Plan `PUT /resource_providers/{uuid}/aggregates`. With
/// `expected_generation` (1.19+) the generation is checked and bumped;
/// without it the aggregates are replaced and the generation stays.
/// Returns the provider generation after the change.
pub fn plan_set_aggregates(
    state: &State,
    uuid: &str,
    aggregates: &[Uuid],
    expected_generation: Option<i64>,
    now: Timestamp,
) -> Result<(ChangeSet, i64)> {
    let provider = find_provider(state, uuid)?;
    let current = provider.row.generation;
    let wanted: BTreeSet<Uuid> = aggregates.iter().copied().collect();
    let mut set = ChangeSet::new();
    let generation = match expected_generation {
        Some(expected) => {
            if expected != current {
                return Err(ModelError::GenerationConflict(
                    "Resource provider's generation already changed. Please update the generation and try again."
                        .to_owned(),
                ));
            }
            let mut row = provider.row.clone();
            row.generation = current + 1;
            row.updated_at = now;
            set.push(Change::PutProvider { row, expected_generation: Some(current) });
            current + 1
        }
        None => current,
    };
    if wanted != provider.aggregates {
        set.push(Change::SetProviderAggregates { provider: provider.uuid(), aggregates: wanted });
    }
    Ok((set, generation))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with_provider() -> (State, Uuid) {
        let mut state = State::with_standard_data(1);
        let uuid = Uuid::from_u128(9);
        crate::test_support::add_root_provider(&mut state, 1, uuid, "rp");
        (state, uuid)
    }

    #[test]
    fn only_the_canonical_spelling_names_the_provider() {
        let mut state = State::with_standard_data(1);
        let uuid = Uuid::from_u128(0xabcd_ef01_2345_4678_89ab_cdef_0123_4567);
        crate::test_support::add_root_provider(&mut state, 1, uuid, "rp");
        let canonical = uuid.to_string();
        assert!(find_provider(&state, &canonical).is_ok());
        for other in [
            canonical.replace('-', ""),
            canonical.to_uppercase(),
            format!("{{{canonical}}}"),
            format!("urn:uuid:{canonical}"),
        ] {
            assert!(
                matches!(find_provider(&state, &other), Err(ModelError::NotFound(m)) if m == format!("No resource provider with uuid {other} found")),
                "{other}"
            );
        }
    }

    #[test]
    fn old_microversion_does_not_bump() {
        let (mut state, uuid) = state_with_provider();
        let aggs = [Uuid::from_u128(1), Uuid::from_u128(2)];
        let (set, generation) = plan_set_aggregates(&state, &uuid.to_string(), &aggs, None, 5).unwrap();
        assert_eq!(generation, 0);
        state.apply(&set);
        assert_eq!(state.providers[&uuid].row.generation, 0);
        assert_eq!(provider_aggregates(&state, &uuid.to_string()).unwrap(), (aggs.to_vec(), 0));
    }

    #[test]
    fn new_microversion_checks_and_bumps_even_when_unchanged() {
        let (mut state, uuid) = state_with_provider();
        let s = uuid.to_string();
        let aggs = [Uuid::from_u128(1)];
        assert!(matches!(plan_set_aggregates(&state, &s, &aggs, Some(3), 5), Err(ModelError::GenerationConflict(_))));
        let (set, generation) = plan_set_aggregates(&state, &s, &aggs, Some(0), 5).unwrap();
        assert_eq!(generation, 1);
        state.apply(&set);
        let (set, generation) = plan_set_aggregates(&state, &s, &aggs, Some(1), 6).unwrap();
        assert_eq!(generation, 2);
        state.apply(&set);
        assert_eq!(state.providers[&uuid].row.generation, 2);
    }

    #[test]
    fn unknown_provider_is_not_found() {
        let (state, _) = state_with_provider();
        assert!(
            matches!(provider_aggregates(&state, "non_existed"), Err(ModelError::NotFound(m)) if m == "No resource provider with uuid non_existed found")
        );
        assert!(plan_set_aggregates(&state, &Uuid::from_u128(77).to_string(), &[], None, 1).is_err());
    }
}
