//! Blazar's dates: `YYYY-MM-DD HH:MM` in requests (or `now`, or RFC 3339
//! as berth's extension); `2050-01-01T10:00:00.000000` for lease dates and
//! event times and `2050-01-01 10:00:00.000000` for `created_at` and
//! `updated_at` in responses.

use berth_compute_api::api;
use berth_http::{ApiError, ApiResult};
use serde_json::{json, Value};

const MONTH_DAYS: [i64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `YYYY-MM-DD HH:MM` (Blazar's input format, strict like `strptime`).
pub(crate) fn parse_blazar_date(text: &str) -> Option<i64> {
    let (date, time) = text.split_once(' ')?;
    let mut d = date.split('-');
    let (y, m, day) = (d.next()?, d.next()?, d.next()?);
    if d.next().is_some() || y.len() != 4 || m.is_empty() || m.len() > 2 || day.is_empty() || day.len() > 2 {
        return None;
    }
    let (hh, mm) = time.split_once(':')?;
    if hh.is_empty() || hh.len() > 2 || mm.is_empty() || mm.len() > 2 {
        return None;
    }
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if ![y, m, day, hh, mm].iter().all(|s| all_digits(s)) {
        return None;
    }
    let (y, m, day, hh, mm): (i64, i64, i64, i64, i64) =
        (y.parse().ok()?, m.parse().ok()?, day.parse().ok()?, hh.parse().ok()?, mm.parse().ok()?);
    if !(1..=12).contains(&m) || hh > 23 || mm > 59 || day < 1 {
        return None;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let max_day = if m == 2 && leap { 29 } else { MONTH_DAYS[(m - 1) as usize] };
    if day > max_day {
        return None;
    }
    Some(api::days_from_civil(y, m, day) * 86_400 + hh * 3600 + mm * 60)
}

/// A lease date: `now` (truncated to the minute, as Blazar does), Blazar's
/// format, or RFC 3339 (extension). 400 with Blazar's message otherwise.
pub(crate) fn parse_date(text: &str, now: i64) -> ApiResult<i64> {
    if text == "now" {
        return Ok(now - now.rem_euclid(60));
    }
    parse_blazar_date(text)
        .or_else(|| if text.contains('T') { api::parse_time(text) } else { None })
        .ok_or_else(|| ApiError::bad_request(format!("{text} is an invalid date. Required format: %Y-%m-%d %H:%M")))
}

/// An explicit `before_end_date`: a date as Blazar parses it (`now` is not
/// one), strictly inside the lease (403 "Datetime is out of lease limits",
/// Blazar's `NotAuthorized`).
pub(crate) fn before_end_date(text: &str, start: i64, end: i64, now: i64) -> ApiResult<i64> {
    if text == "now" {
        return Err(ApiError::bad_request("now is an invalid date. Required format: %Y-%m-%d %H:%M"));
    }
    let t = parse_date(text, now)?;
    if !(start < t && t < end) {
        return Err(ApiError::forbidden("Datetime is out of lease limits"));
    }
    Ok(t)
}

pub(crate) fn split(ts: i64) -> ((i64, i64, i64), (i64, i64, i64)) {
    let days = ts.div_euclid(86_400);
    let secs = ts.rem_euclid(86_400);
    (civil_from_days(days), (secs / 3600, secs % 3600 / 60, secs % 60))
}

/// `2050-01-01T10:00:00.000000` (lease dates, event times).
pub fn iso(ts: i64) -> String {
    let ((y, m, d), (hh, mm, ss)) = split(ts);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.000000")
}

/// `2026-11-23 10:58:47.000000` (`created_at`, `updated_at`).
pub fn stamp(ts: i64) -> String {
    let ((y, m, d), (hh, mm, ss)) = split(ts);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}.000000")
}

pub(crate) fn opt_stamp(ts: Option<i64>) -> Value {
    ts.map_or(Value::Null, |t| json!(stamp(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_in_blazar_formats() {
        let t = parse_blazar_date("2050-01-01 10:00").unwrap();
        assert_eq!(iso(t), "2050-01-01T10:00:00.000000");
        assert_eq!(stamp(t + 5), "2050-01-01 10:00:05.000000");
        assert_eq!(parse_blazar_date("2024-02-29 23:59").map(iso).as_deref(), Some("2024-02-29T23:59:00.000000"));
        for bad in
            ["Bogus-date 13:13", "2050-02-30 10:00", "2050-01-01 24:00", "2050-01-01T10:00", "2050-01-01 10:00:00"]
        {
            assert_eq!(parse_blazar_date(bad), None, "{bad}");
        }
        assert_eq!(parse_date("2050-01-01T10:00:00Z", 0).unwrap(), t, "RFC 3339 extension");
        assert_eq!(parse_date("now", 125).unwrap(), 120);
        assert_eq!(
            parse_date("Bogus-date 13:13", 0).unwrap_err().detail,
            "Bogus-date 13:13 is an invalid date. Required format: %Y-%m-%d %H:%M"
        );
    }
}
