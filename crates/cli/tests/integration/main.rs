//! HTTP integration tests: each test starts the real `berth` binary on a
//! loopback port with a fresh data directory and talks to it over HTTP.

mod allocation_order;
mod auth;
mod bad_input;
mod candidate_options;
mod compute;
mod concurrency;
mod connections;
mod durability;
mod harness;
mod image_api;
mod image_objects;
mod images;
mod import_placement;
mod isolation;
mod keystone;
mod logs;
mod multiprocess;
mod nested_race;
mod outage;
mod pg_restart;
mod support;
