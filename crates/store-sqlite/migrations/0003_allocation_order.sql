-- The order allocations were written in: a consumer's rows are re-inserted
-- on every write with ascending `seq` in the request body's order (upstream
-- lists allocations in row-id order). Existing rows keep seq 0.
ALTER TABLE allocations ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX allocations_by_seq ON allocations (seq);
