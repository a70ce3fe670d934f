-- Cell database schema (one file per cell). Uuids are lowercase hyphenated
-- text, timestamps Unix seconds, booleans 0/1 integers.

-- Instances: a column for every sort key and filter, plus the whole
-- InstanceSpec as JSON (`spec`). Columns duplicating spec fields are
-- rewritten together with it.
CREATE TABLE instances (
    uuid                TEXT PRIMARY KEY NOT NULL,
    project_id          TEXT NOT NULL,
    user_id             TEXT NOT NULL,
    host                TEXT,
    node                TEXT,
    availability_zone   TEXT,
    vm_state            TEXT NOT NULL,
    task_state          TEXT,
    power_state         INTEGER NOT NULL,
    locked              INTEGER NOT NULL,
    locked_by           TEXT,
    locked_reason       TEXT,
    progress            INTEGER NOT NULL,
    display_name        TEXT NOT NULL,
    display_description TEXT,
    hostname            TEXT NOT NULL,
    image_ref           TEXT,
    key_name            TEXT,
    reservation_id      TEXT NOT NULL,
    launch_index        INTEGER NOT NULL,
    config_drive        TEXT NOT NULL,
    access_ip_v4        TEXT,
    access_ip_v6        TEXT,
    instance_type_id    INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER,
    launched_at         INTEGER,
    terminated_at       INTEGER,
    deleted             INTEGER NOT NULL DEFAULT 0,
    deleted_at          INTEGER,
    spec                TEXT NOT NULL
);

-- The default listing: not deleted, newest first (optionally per
-- project), paged by (created_at, uuid).
CREATE INDEX instances_deleted_created ON instances (deleted, created_at, uuid);
CREATE INDEX instances_project_created ON instances (project_id, deleted, created_at, uuid);
CREATE INDEX instances_host ON instances (host, deleted);
CREATE INDEX instances_task_state ON instances (task_state) WHERE task_state IS NOT NULL;
CREATE INDEX instances_updated ON instances (updated_at);
CREATE INDEX instances_reservation ON instances (reservation_id);

CREATE TABLE instance_tags (
    uuid TEXT NOT NULL,
    tag  TEXT NOT NULL,
    PRIMARY KEY (uuid, tag)
);
CREATE INDEX instance_tags_tag ON instance_tags (tag, uuid);

CREATE TABLE services (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid            TEXT NOT NULL UNIQUE,
    host            TEXT NOT NULL,
    "binary"        TEXT NOT NULL,
    disabled        INTEGER NOT NULL,
    disabled_reason TEXT,
    forced_down     INTEGER NOT NULL,
    last_seen_up    INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER,
    UNIQUE (host, "binary")
);

CREATE TABLE compute_nodes (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid                TEXT NOT NULL UNIQUE,
    host                TEXT NOT NULL,
    hypervisor_hostname TEXT NOT NULL,
    hypervisor_type     TEXT NOT NULL,
    hypervisor_version  INTEGER NOT NULL,
    host_ip             TEXT NOT NULL,
    vcpus               INTEGER NOT NULL,
    memory_mb           INTEGER NOT NULL,
    local_gb            INTEGER NOT NULL,
    cpu_info            TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER
);
CREATE INDEX compute_nodes_host ON compute_nodes (host);

CREATE TABLE instance_actions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid TEXT NOT NULL,
    action        TEXT NOT NULL,
    request_id    TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    project_id    TEXT NOT NULL,
    start_time    INTEGER NOT NULL,
    message       TEXT,
    updated_at    INTEGER,
    UNIQUE (instance_uuid, request_id)
);

CREATE TABLE instance_action_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    action_id   INTEGER NOT NULL,
    event       TEXT NOT NULL,
    start_time  INTEGER NOT NULL,
    finish_time INTEGER,
    result      TEXT,
    traceback   TEXT,
    host        TEXT,
    details     TEXT
);
CREATE INDEX instance_action_events_action ON instance_action_events (action_id);

CREATE TABLE instance_faults (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid TEXT NOT NULL,
    code          INTEGER NOT NULL,
    message       TEXT NOT NULL,
    details       TEXT NOT NULL,
    host          TEXT,
    created_at    INTEGER NOT NULL
);
CREATE INDEX instance_faults_instance ON instance_faults (instance_uuid, created_at);
