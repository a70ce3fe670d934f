-- The compute control tables, one row per entity keyed by kind and key,
-- the entity as JSON (berth_store::json); loaded into memory at start.
CREATE TABLE compute_rows (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (kind, key)
);
