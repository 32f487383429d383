-- An operator may cancel a run, which withdraws the approvals it waits
-- for: their rows say 'cancelled', and a decision sent after is refused.
ALTER TABLE approvals DROP CONSTRAINT approvals_state_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_state_check
    CHECK (state IN ('pending', 'approved', 'rejected', 'expired', 'cancelled'));

-- Every cancel, pause, resume and message an operator sent a run, whether
-- the run took it or not: who, when, why, and what came of it.
CREATE TABLE run_controls (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant     text        NOT NULL,
    run_id     text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('cancel', 'pause', 'resume', 'message')),
    actor      text        NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    message_id text        NOT NULL DEFAULT '',
    outcome    text        NOT NULL CHECK (outcome IN ('accepted', 'repeated', 'refused', 'invalid', 'not_found', 'unavailable')),
    detail     text        NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT statement_timestamp()
);

CREATE INDEX run_controls_run_idx ON run_controls (tenant, run_id, at);

---- create above / drop below ----

DROP TABLE run_controls;
UPDATE approvals SET state = 'expired' WHERE state = 'cancelled';
ALTER TABLE approvals DROP CONSTRAINT approvals_state_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_state_check
    CHECK (state IN ('pending', 'approved', 'rejected', 'expired'));
