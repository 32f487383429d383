-- Validates the rows written before migration 010 against its arguments-hash
-- check. VALIDATE CONSTRAINT takes a SHARE UPDATE EXCLUSIVE lock: claims and
-- completions go on while it scans. (In its own migration because migration
-- 010's ACCESS EXCLUSIVE lock would otherwise be held until this scan ends.)
ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_args_hash_check;

---- create above / drop below ----

-- Nothing to undo: a validated constraint is what 010 leaves behind once
-- its rows are checked.
