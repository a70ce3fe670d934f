-- Moves (resize, cold migration): Nova's `migrations` table. `uuid` is
-- also the placement consumer holding the source's resources while the
-- move is under way. Flavors are kept whole (JSON), as Nova keeps
-- old_flavor/new_flavor in instance_extra.
CREATE TABLE migrations (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid           TEXT NOT NULL UNIQUE,
    instance_uuid  TEXT NOT NULL,
    migration_type TEXT NOT NULL,
    status         TEXT NOT NULL,
    source_compute TEXT,
    source_node    TEXT,
    dest_compute   TEXT,
    dest_node      TEXT,
    dest_host      TEXT,
    old_flavor     TEXT NOT NULL,
    new_flavor     TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER,
    deleted        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX migrations_instance ON migrations (instance_uuid, status);
CREATE INDEX migrations_status ON migrations (status);
CREATE INDEX migrations_created ON migrations (created_at, id);
