-- Initial placement schema. Uuids are stored as lowercase hyphenated text;
-- timestamps as Unix seconds.
CREATE TABLE resource_providers (
    id          INTEGER PRIMARY KEY,
    uuid        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL UNIQUE,
    generation  INTEGER NOT NULL,
    parent_uuid TEXT,
    root_uuid   TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE inventories (
    provider_uuid    TEXT NOT NULL,
    resource_class   TEXT NOT NULL,
    total            INTEGER NOT NULL,
    reserved         INTEGER NOT NULL,
    min_unit         INTEGER NOT NULL,
    max_unit         INTEGER NOT NULL,
    step_size        INTEGER NOT NULL,
    allocation_ratio REAL NOT NULL,
    PRIMARY KEY (provider_uuid, resource_class)
) WITHOUT ROWID;

CREATE TABLE provider_traits (
    provider_uuid TEXT NOT NULL,
    trait         TEXT NOT NULL,
    PRIMARY KEY (provider_uuid, trait)
) WITHOUT ROWID;

CREATE TABLE provider_aggregates (
    provider_uuid  TEXT NOT NULL,
    aggregate_uuid TEXT NOT NULL,
    PRIMARY KEY (provider_uuid, aggregate_uuid)
) WITHOUT ROWID;

CREATE TABLE consumers (
    uuid          TEXT PRIMARY KEY,
    project_id    TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    generation    INTEGER NOT NULL,
    consumer_type TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE allocations (
    consumer_uuid  TEXT NOT NULL,
    provider_uuid  TEXT NOT NULL,
    resource_class TEXT NOT NULL,
    used           INTEGER NOT NULL,
    PRIMARY KEY (consumer_uuid, provider_uuid, resource_class)
) WITHOUT ROWID;
CREATE INDEX allocations_by_provider ON allocations (provider_uuid);

CREATE TABLE resource_classes (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    updated_at INTEGER
);

CREATE TABLE traits (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);
