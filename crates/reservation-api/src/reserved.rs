//! Reserved servers at the compute API: the boot hints `reserved=True` and
//! `lease_params` (JSON text: `name`, `start`, `end`, optional
//! `before_end`, dates in Blazar's formats) read as a lease request, and
//! the [`BootExtension`] the process wiring registers on the compute
//! runtime so that the lease is admitted in the boot's admission write
//! (`berth_reservation_model::reserved` plans it).
//!
//! Hints arrive as strings or as one-element lists (the compute API keeps
//! them as lists of strings either way); a `lease_params` object sent as
//! JSON rather than as text is taken too.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_compute::extension::{BootExtension, HeldBoot};
use berth_compute_model::plan::BootAdmission;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};
use berth_reservation_model::reserved::{plan_admit_reserved, plan_drop_held, slot_request};
use berth_reservation_model::LeaseRequest;
use berth_reservations::Reservations;
use serde_json::Value;
use uuid::Uuid;

use crate::dates::parse_date;

/// The hint asking for a reserved server.
pub const RESERVED_HINT: &str = "reserved";
/// The hint carrying the lease's parameters.
pub const LEASE_PARAMS_HINT: &str = "lease_params";

/// A reserved boot's lease, as its hints ask for it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseParams {
    /// Lease name.
    pub name: Option<String>,
    /// Start.
    pub start: Timestamp,
    /// End.
    pub end: Timestamp,
    /// `before_end` (the default is `minutes_before_end` before the end).
    pub before_end: Option<Timestamp>,
}

fn invalid(message: impl Into<String>) -> ComputeError {
    ComputeError::Invalid(message.into())
}

fn single<'a>(hints: &'a BTreeMap<String, Vec<String>>, key: &str) -> Result<Option<&'a str>, ComputeError> {
    match hints.get(key).map(Vec::as_slice) {
        None => Ok(None),
        Some([one]) => Ok(Some(one.as_str())),
        Some(_) => Err(invalid(format!("Invalid {key} hint: one value expected"))),
    }
}

/// Read the reserved-server hints: `None` when the boot is not reserved
/// (no `reserved` hint, or a false one). A 400 (`Invalid`) for a
/// `reserved` that is not a boolean, a missing or malformed
/// `lease_params`, a bad date, a start before the current minute or an
/// end not after the start (Blazar's checks and messages).
pub fn lease_params(
    hints: &BTreeMap<String, Vec<String>>,
    now: Timestamp,
) -> Result<Option<LeaseParams>, ComputeError> {
    let Some(reserved) = single(hints, RESERVED_HINT)? else { return Ok(None) };
    match reserved.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => {}
        "false" | "0" | "no" => return Ok(None),
        _ => return Err(invalid(format!("Invalid reserved hint: {reserved} is not a boolean"))),
    }
    let text = single(hints, LEASE_PARAMS_HINT)?
        .ok_or_else(|| invalid("A reserved server needs the lease_params hint (name, start, end)"))?;
    let params: Value = serde_json::from_str(text).map_err(|_| invalid("Invalid lease_params hint: not JSON"))?;
    let map = params.as_object().ok_or_else(|| invalid("Invalid lease_params hint: not a JSON object"))?;
    let text_field = |keys: &[&str]| -> Result<Option<String>, ComputeError> {
        for key in keys {
            match map.get(*key) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => return Ok(Some(s.clone())),
                Some(_) => return Err(invalid(format!("Invalid lease_params hint: {key} must be a string"))),
            }
        }
        Ok(None)
    };
    let date = |keys: &[&str]| -> Result<Option<Timestamp>, ComputeError> {
        text_field(keys)?.map(|t| parse_date(&t, now).map_err(|e| invalid(e.detail))).transpose()
    };
    let name = text_field(&["name"])?;
    if name.as_ref().is_some_and(|n| n.chars().count() > 80) {
        return Err(invalid("Lease name must be at most 80 characters long."));
    }
    let start =
        date(&["start", "start_date"])?.ok_or_else(|| invalid("Invalid lease_params hint: start is missing"))?;
    let end = date(&["end", "end_date"])?.ok_or_else(|| invalid("Invalid lease_params hint: end is missing"))?;
    let minute = now - now.rem_euclid(60);
    if start < minute {
        return Err(invalid("Start date must be later than current date"));
    }
    if end <= start {
        return Err(invalid("End date must be later than start date."));
    }
    let before_end = date(&["before_end", "before_end_date"])?;
    if before_end.is_some_and(|t| !(start < t && t < end)) {
        return Err(invalid("Before end date must be between lease start and end dates"));
    }
    Ok(Some(LeaseParams { name, start, end, before_end }))
}

/// The reserved-server extension of the boot path (registered on the
/// compute runtime by the process wiring).
pub struct ReservedServers {
    /// The lease runtime (its settings, and its loop to wake).
    pub reservations: Arc<Reservations>,
}

impl std::fmt::Debug for ReservedServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservedServers").finish_non_exhaustive()
    }
}

impl BootExtension for ReservedServers {
    fn plan_admit(
        &self,
        world: &World,
        boot: &BootAdmission,
        admitted: &[Uuid],
        now: Timestamp,
    ) -> Result<Option<HeldBoot>, ComputeError> {
        let Some(params) = lease_params(&boot.request_spec.hints, now)? else { return Ok(None) };
        let name = params.name.unwrap_or_else(|| format!("{}-lease", boot.request_spec.reservation_id));
        let before_end = params
            .before_end
            .unwrap_or((params.end - self.reservations.config.minutes_before_end * 60).max(params.start));
        let request = LeaseRequest {
            name,
            user_id: boot.user_id.clone(),
            project_id: boot.project_id.clone(),
            start: params.start,
            end: params.end,
            before_end: Some(before_end),
            reservations: vec![slot_request(&boot.request_spec.flavor, admitted.len() as i64)],
        };
        let (changes, hints) = plan_admit_reserved(world, &request, &mut Uuid::new_v4, now)?;
        Ok(Some(HeldBoot { changes, hints }))
    }

    fn plan_delete_held(&self, world: &World, instance: &Uuid, now: Timestamp) -> Result<WorldChangeSet, ComputeError> {
        plan_drop_held(world, instance, &mut Uuid::new_v4, now)
    }

    fn admitted(&self) {
        self.reservations.leases_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), vec![(*v).to_owned()])).collect()
    }

    const NOW: i64 = 2_208_988_800; // 2040-01-01 00:00

    #[test]
    fn reserved_hints_read_as_a_lease_request() {
        let ok = hints(&[
            ("reserved", "True"),
            ("lease_params", r#"{"name": "l1", "start": "2040-01-02 09:00", "end": "2040-01-02 17:00"}"#),
        ]);
        let params = lease_params(&ok, NOW).unwrap().unwrap();
        assert_eq!(params.name.as_deref(), Some("l1"));
        assert_eq!((params.start - NOW, params.end - NOW), (86_400 + 9 * 3600, 86_400 + 17 * 3600));
        assert_eq!(lease_params(&hints(&[("reserved", "false")]), NOW).unwrap(), None);
        assert_eq!(lease_params(&BTreeMap::new(), NOW).unwrap(), None);
        let err = |h: &[(&str, &str)]| match lease_params(&hints(h), NOW) {
            Err(ComputeError::Invalid(m)) => m,
            other => panic!("{h:?}: {other:?}"),
        };
        assert!(err(&[("reserved", "True")]).contains("lease_params"));
        assert!(err(&[("reserved", "maybe")]).contains("not a boolean"));
        assert!(err(&[("reserved", "true"), ("lease_params", "{not json")]).contains("not JSON"));
        assert!(err(&[("reserved", "true"), ("lease_params", r#"{"end": "2040-01-02 17:00"}"#)]).contains("start"));
        assert_eq!(
            err(&[
                ("reserved", "true"),
                ("lease_params", r#"{"start": "2039-01-02 09:00", "end": "2040-01-02 17:00"}"#)
            ]),
            "Start date must be later than current date"
        );
        assert_eq!(
            err(&[
                ("reserved", "true"),
                ("lease_params", r#"{"start": "2040-01-02 09:00", "end": "2040-01-02 09:00"}"#)
            ]),
            "End date must be later than start date."
        );
        assert!(err(&[("reserved", "true"), ("lease_params", r#"{"start": "tomorrow", "end": "2040-01-02 09:00"}"#)])
            .contains("invalid date"));
    }
}
