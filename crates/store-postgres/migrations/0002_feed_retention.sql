-- Change-feed retention: old rows of berth_changes are pruned; a process
-- whose last seen sequence number is below `pruned_through` missed changes
-- and must reload its snapshot instead of catching up.
CREATE TABLE berth_feed_state (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_through BIGINT NOT NULL
);
INSERT INTO berth_feed_state (id, pruned_through) VALUES (1, 0);
CREATE INDEX berth_changes_committed_at ON berth_changes (committed_at);
