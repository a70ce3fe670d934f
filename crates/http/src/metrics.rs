//! Prometheus metrics, rendered in the text exposition format at
//! `GET /metrics`. Kept dependency-free: a mutex-protected map of counters
//! and fixed-bucket histograms, updated once per request.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Latency histogram bucket upper bounds, in seconds.
const BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

#[derive(Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// The method as a static label (anything unusual is "OTHER").
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::HEAD => "HEAD",
        Method::PATCH => "PATCH",
        _ => "OTHER",
    }
}

/// API, method, route, status: one request counter.
type RequestKey = (&'static str, &'static str, &'static str, u16);

/// One route's latency, summarised from its histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencySummary {
    /// Route label (as in `/metrics`).
    pub route: String,
    /// Method.
    pub method: &'static str,
    /// Requests observed.
    pub count: u64,
    /// Mean seconds.
    pub mean: f64,
    /// Upper bound (seconds) of the bucket holding the median.
    pub p50: f64,
    /// Upper bound (seconds) of the bucket holding the 99th percentile.
    pub p99: f64,
}

/// Request metrics of every API of one process.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    // Keys are static strings (API names, route patterns, method names,
    // error codes), so recording a request allocates nothing.
    requests: Mutex<BTreeMap<RequestKey, u64>>,
    latency: Mutex<BTreeMap<(&'static str, &'static str, &'static str), Histogram>>,
    error_codes: Mutex<BTreeMap<&'static str, u64>>,
}

/// The route label: placement's routes as they are (it is served at the
/// root), other APIs' routes under their name.
fn route_label(api: &str, route: &str) -> String {
    if api == "placement" {
        route.to_owned()
    } else {
        format!("/{api}{route}")
    }
}

impl HttpMetrics {
    /// Record one finished request.
    pub fn observe(
        &self,
        api: &'static str,
        route: &'static str,
        method: &axum::http::Method,
        status: u16,
        seconds: f64,
        error_code: Option<&'static str>,
    ) {
        let method = method_label(method);
        if let Ok(mut requests) = self.requests.lock() {
            *requests.entry((api, route, method, status)).or_insert(0) += 1;
        }
        if let Ok(mut latency) = self.latency.lock() {
            let h = latency.entry((api, route, method)).or_default();
            if h.counts.is_empty() {
                h.counts = vec![0; BUCKETS.len()];
            }
            for (idx, bound) in BUCKETS.iter().enumerate() {
                if seconds <= *bound {
                    h.counts[idx] += 1;
                }
            }
            h.sum += seconds;
            h.count += 1;
        }
        if let Some(code) = error_code {
            if let Ok(mut codes) = self.error_codes.lock() {
                *codes.entry(code).or_insert(0) += 1;
            }
        }
    }

    /// Per route and method: requests, and the bucket bounds (seconds)
    /// that hold their median and 99th percentile (the dashboard's
    /// activity view; `+Inf` shows as the largest bound).
    pub fn latency_summary(&self) -> Vec<LatencySummary> {
        let Ok(latency) = self.latency.lock() else { return Vec::new() };
        let quantile = |h: &Histogram, q: f64| -> f64 {
            let want = (h.count as f64 * q).ceil() as u64;
            BUCKETS.iter().zip(&h.counts).find(|(_, n)| **n >= want).map_or(BUCKETS[BUCKETS.len() - 1], |(b, _)| *b)
        };
        latency
            .iter()
            .filter(|(_, h)| h.count > 0)
            .map(|((api, route, method), h)| LatencySummary {
                route: route_label(api, route),
                method,
                count: h.count,
                mean: h.sum / h.count as f64,
                p50: quantile(h, 0.5),
                p99: quantile(h, 0.99),
            })
            .collect()
    }

    /// Requests so far by status class: (all, 4xx, 5xx).
    pub fn status_totals(&self) -> (u64, u64, u64) {
        let Ok(requests) = self.requests.lock() else { return (0, 0, 0) };
        requests.iter().fold((0, 0, 0), |(all, c4, c5), ((_, _, _, status), n)| {
            (all + n, c4 + if (400..500).contains(status) { *n } else { 0 }, c5 + if *status >= 500 { *n } else { 0 })
        })
    }

    /// Render in the Prometheus text format. `counters` and `gauges` are
    /// extra (name, help, value) samples of other parts of the process.
    pub fn render(&self, counters: &[(&str, &str, u64)], gauges: &[(&str, &str, f64)]) -> String {
        let mut out = String::new();
        out.push_str("# HELP berth_http_requests_total HTTP requests by route, method and status.\n");
        out.push_str("# TYPE berth_http_requests_total counter\n");
        if let Ok(requests) = self.requests.lock() {
            for ((api, route, method, status), n) in requests.iter() {
                let route = route_label(api, route);
                out.push_str(&format!(
                    "berth_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}\n"
                ));
            }
        }
        out.push_str("# HELP berth_http_request_duration_seconds Request latency by route and method.\n");
        out.push_str("# TYPE berth_http_request_duration_seconds histogram\n");
        if let Ok(latency) = self.latency.lock() {
            for ((api, route, method), h) in latency.iter() {
                let route = route_label(api, route);
                let labels = format!("route=\"{route}\",method=\"{method}\"");
                for (idx, bound) in BUCKETS.iter().enumerate() {
                    out.push_str(&format!(
                        "berth_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {}\n",
                        h.counts[idx]
                    ));
                }
                out.push_str(&format!(
                    "berth_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n",
                    h.count
                ));
                out.push_str(&format!("berth_http_request_duration_seconds_sum{{{labels}}} {}\n", h.sum));
                out.push_str(&format!("berth_http_request_duration_seconds_count{{{labels}}} {}\n", h.count));
            }
        }
        out.push_str("# HELP berth_api_errors_total Error responses by placement error code (409 placement.concurrent_update = claim conflicts).\n");
        out.push_str("# TYPE berth_api_errors_total counter\n");
        if let Ok(codes) = self.error_codes.lock() {
            for (code, n) in codes.iter() {
                out.push_str(&format!("berth_api_errors_total{{code=\"{code}\"}} {n}\n"));
            }
        }
        for (name, help, value) in counters {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"));
        }
        for (name, help, value) in gauges {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = HttpMetrics::default();
        use axum::http::Method;
        m.observe("placement", "/resource_providers", &Method::GET, 200, 0.0007, None);
        m.observe("placement", "/resource_providers", &Method::GET, 200, 0.2, None);
        m.observe(
            "placement",
            "/allocations/{consumer_uuid}",
            &Method::PUT,
            409,
            0.001,
            Some("placement.concurrent_update"),
        );
        m.observe("compute", "/servers", &Method::POST, 202, 0.001, None);
        let text = m.render(&[("berth_x_total", "X.", 7)], &[("berth_providers", "Providers.", 3.0)]);
        assert!(text.contains("berth_http_requests_total{route=\"/compute/servers\",method=\"POST\",status=\"202\"} 1"));
        assert!(text.contains("berth_x_total 7"));
        assert!(
            text.contains("berth_http_requests_total{route=\"/resource_providers\",method=\"GET\",status=\"200\"} 2")
        );
        assert!(text.contains(
            "berth_http_request_duration_seconds_bucket{route=\"/resource_providers\",method=\"GET\",le=\"0.001\"} 1"
        ));
        assert!(
            text.contains("berth_http_request_duration_seconds_count{route=\"/resource_providers\",method=\"GET\"} 2")
        );
        assert!(text.contains("berth_api_errors_total{code=\"placement.concurrent_update\"} 1"));
        assert!(text.contains("berth_providers 3"));
    }

    #[test]
    fn latency_summary_names_the_buckets_of_the_median_and_the_99th_percentile() {
        let m = HttpMetrics::default();
        let get = axum::http::Method::GET;
        for _ in 0..98 {
            m.observe("placement", "/traits", &get, 200, 0.0007, None);
        }
        m.observe("placement", "/traits", &get, 500, 0.3, None);
        m.observe("placement", "/traits", &get, 404, 0.3, None);
        let summary = m.latency_summary();
        assert_eq!(summary.len(), 1);
        let s = &summary[0];
        assert_eq!((s.route.as_str(), s.method, s.count), ("/traits", "GET", 100));
        assert_eq!(s.p50, 0.001, "98 of 100 took 0.7 ms: the 1 ms bucket");
        assert_eq!(s.p99, 0.5, "the 99th took 300 ms: the 500 ms bucket");
        assert_eq!(m.status_totals(), (100, 1, 1));
    }
}
