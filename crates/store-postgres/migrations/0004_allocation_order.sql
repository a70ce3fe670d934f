-- The order allocations were written in: a consumer's rows are re-inserted
-- on every write with ascending `seq` in the request body's order (upstream
-- lists allocations in row-id order). Existing rows are numbered now.
ALTER TABLE allocations ADD COLUMN seq BIGSERIAL;
