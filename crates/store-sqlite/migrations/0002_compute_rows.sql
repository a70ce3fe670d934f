-- The compute control tables (flavors, images, server groups, cell and
-- host mappings, compute-node references, instance mappings, build
-- requests, request specs, quotas, aggregates), one row per entity keyed
-- by kind and key, the entity as JSON (berth_store::json). The whole table
-- is loaded into memory at start; the API reads it from there.
CREATE TABLE compute_rows (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (kind, key)
);
