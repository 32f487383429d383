-- An approver may edit a step's arguments and approve the edited call (the
-- decision 'edit'). The audit row keeps both hashes: args_hash is the hash
-- of the arguments the approver reviewed, edited_args_hash and edited_args
-- what they asked to run instead. The approvals row keeps the proposed
-- arguments in args and args_hash, and, once the run applied an edit, the
-- arguments that ran in edited_args and edited_args_hash.
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_decision_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_decision_check
    CHECK (decision IN ('approve', 'reject', 'edit') OR (decision = '' AND outcome = 'invalid'));
-- An edit the run refused (its own registry disagreed with the service's)
-- stops being the decision of record, so that the step, still pending, can
-- be decided again: its row says refused_by_run and why.
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_outcome_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_outcome_check
    CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'args_mismatch', 'not_pending', 'forbidden', 'invalid',
                       'refused_by_run'));
ALTER TABLE approval_decisions ADD COLUMN edited_args jsonb;
ALTER TABLE approval_decisions ADD COLUMN edited_args_hash text NOT NULL DEFAULT '';

ALTER TABLE approvals ADD COLUMN edited_args jsonb;
ALTER TABLE approvals ADD COLUMN edited_args_hash text;
ALTER TABLE approvals ADD CONSTRAINT approvals_edit_columns CHECK (
    (edited_args IS NULL) = (edited_args_hash IS NULL)
    AND (edited_args_hash IS NULL OR (length(edited_args_hash) = 64 AND edited_args_hash !~ '[^0123456789abcdef]'))
    AND (edited_args IS NULL OR state = 'approved'));

-- What the deadline does to the step undecided, as the run's starter chose.
ALTER TABLE approvals ADD COLUMN on_expiry text NOT NULL DEFAULT 'expire'
    CHECK (on_expiry IN ('expire', 'reject'));

-- Inboxes list a tenant's pending steps nearest deadline first; the index
-- gives that order whole, so a page reads only its own rows. It replaces
-- the (tenant, deadline) index of 007, whose work it does too.
CREATE INDEX approvals_pending_by_deadline_idx ON approvals (tenant, deadline, run_id, step) WHERE state = 'pending';
DROP INDEX approvals_pending_deadline_idx;

---- create above / drop below ----

CREATE INDEX approvals_pending_deadline_idx ON approvals (tenant, deadline) WHERE state = 'pending';
DROP INDEX approvals_pending_by_deadline_idx;
ALTER TABLE approvals DROP COLUMN on_expiry;
ALTER TABLE approvals DROP CONSTRAINT approvals_edit_columns;
ALTER TABLE approvals DROP COLUMN edited_args_hash;
ALTER TABLE approvals DROP COLUMN edited_args;
ALTER TABLE approval_decisions DROP COLUMN edited_args_hash;
ALTER TABLE approval_decisions DROP COLUMN edited_args;
-- The audit rows of edits stay: the narrower checks apply to new rows only.
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_decision_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_decision_check
    CHECK (decision IN ('approve', 'reject') OR (decision = '' AND outcome = 'invalid')) NOT VALID;
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_outcome_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_outcome_check
    CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'args_mismatch', 'not_pending', 'forbidden', 'invalid')) NOT VALID;
