-- Every decision goes through one path, whoever makes it: the CLI without
-- ONCERUN_API (with the database's and Temporal's credentials) records its
-- decisions in approval_decisions as the approvals service does, with via
-- 'cli' (resolution_decisions allowed 'cli' from the start). Before this, it
-- signalled the run directly and left no audit row.
--
-- The table takes one row per human request; the check's scan under the
-- ACCESS EXCLUSIVE lock is short, and holds up decisions only.
ALTER TABLE approval_decisions
    DROP CONSTRAINT approval_decisions_via_check,
    ADD CONSTRAINT approval_decisions_via_check CHECK (via IN ('api', 'inbox', 'cli'));

---- create above / drop below ----

-- The audit rows of the CLI's decisions stay: the narrower check applies to
-- new rows only.
ALTER TABLE approval_decisions
    DROP CONSTRAINT approval_decisions_via_check,
    ADD CONSTRAINT approval_decisions_via_check CHECK (via IN ('api', 'inbox')) NOT VALID;
