-- Initial placement schema. Uuids are stored as lowercase hyphenated text;
-- timestamps as Unix seconds.
CREATE TABLE resource_providers (
    id          BIGINT PRIMARY KEY,
    uuid        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL UNIQUE,
    generation  BIGINT NOT NULL,
    parent_uuid TEXT,
    root_uuid   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE inventories (
    provider_uuid    TEXT NOT NULL,
    resource_class   TEXT NOT NULL,
    total            BIGINT NOT NULL,
    reserved         BIGINT NOT NULL,
    min_unit         BIGINT NOT NULL,
    max_unit         BIGINT NOT NULL,
    step_size        BIGINT NOT NULL,
    allocation_ratio DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (provider_uuid, resource_class)
);

CREATE TABLE provider_traits (
    provider_uuid TEXT NOT NULL,
    trait         TEXT NOT NULL,
    PRIMARY KEY (provider_uuid, trait)
);

CREATE TABLE provider_aggregates (
    provider_uuid  TEXT NOT NULL,
    aggregate_uuid TEXT NOT NULL,
    PRIMARY KEY (provider_uuid, aggregate_uuid)
);

CREATE TABLE consumers (
    uuid          TEXT PRIMARY KEY,
    project_id    TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    generation    BIGINT NOT NULL,
    consumer_type TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE allocations (
    consumer_uuid  TEXT NOT NULL,
    provider_uuid  TEXT NOT NULL,
    resource_class TEXT NOT NULL,
    used           BIGINT NOT NULL,
    PRIMARY KEY (consumer_uuid, provider_uuid, resource_class)
);
CREATE INDEX allocations_by_provider ON allocations (provider_uuid);

CREATE TABLE resource_classes (
    id         BIGINT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);

CREATE TABLE traits (
    id         BIGINT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

-- The change feed: every committed write appends its change set, in commit
-- order (writers hold a transaction-level advisory lock, so sequence order
-- is commit order). Other berth processes apply these to their snapshots.
CREATE TABLE berth_changes (
    seq          BIGSERIAL PRIMARY KEY,
    payload      TEXT NOT NULL,
    committed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
