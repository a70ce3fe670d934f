//! The compute side of `berth serve`: the compute runtime, its APIs
//! (compute, image, agent, admin, identity) and their dispatch.

use axum::body::Body;
use axum::http::Response;
use berth_http::Server;

use crate::router::Target;

/// The compute APIs of one process.
pub(crate) struct ComputeServices {}

impl ComputeServices {
    /// Dispatch a request for one of the compute-side APIs.
    pub(crate) async fn dispatch(
        &self,
        _server: &Server,
        _target: Target<'_>,
        _request: axum::extract::Request,
    ) -> Response<Body> {
        Response::builder().status(404).body(Body::empty()).unwrap_or_default()
    }

    /// Dispatch a request on the compute-only listener.
    pub(crate) async fn dispatch_compute(
        &self,
        _server: &Server,
        _path: &str,
        _request: axum::extract::Request,
    ) -> Response<Body> {
        Response::builder().status(404).body(Body::empty()).unwrap_or_default()
    }

    /// Counters for `/metrics`.
    pub(crate) fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        Vec::new()
    }

    /// Gauges for `/metrics`.
    pub(crate) fn gauges(&self) -> Vec<(&'static str, &'static str, f64)> {
        Vec::new()
    }
}
