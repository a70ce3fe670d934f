//! The crate's one integration-test binary: views checked against Nova's
//! api-samples and response schemas, request schemas against Nova's.

mod fixtures;
mod flavors_quotas;
mod hosts;
mod misc;
mod schemas;
mod servers;
mod support;
