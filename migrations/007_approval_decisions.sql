-- Every decision an approver sends through the approvals service, accepted or
-- refused: who, when, what, and from which address. One accepted decision per
-- step is the decision of record; a repeated request finds it, a different
-- one is refused. The run's workflow stays the source of truth for what was
-- applied; the approvals table shows it.
CREATE TABLE approval_decisions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    run_id      text        NOT NULL,
    step        bigint      NOT NULL CHECK (step >= 1),
    decision    text        NOT NULL CHECK (decision IN ('approve', 'reject')),
    outcome     text        NOT NULL
                            CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'args_mismatch', 'not_pending', 'forbidden')),
    args_hash   text        NOT NULL,
    approver    text        NOT NULL,
    role        text        NOT NULL,
    comment     text        NOT NULL DEFAULT '',
    remote_addr text        NOT NULL,
    user_agent  text        NOT NULL DEFAULT '',
    via         text        NOT NULL CHECK (via IN ('api', 'inbox')),
    decided_at  timestamptz NOT NULL DEFAULT statement_timestamp()
);

-- One decision of record per step, however many approvers click at once.
CREATE UNIQUE INDEX approval_decisions_accepted_idx ON approval_decisions (tenant, run_id, step)
    WHERE outcome = 'accepted';

CREATE INDEX approval_decisions_step_idx ON approval_decisions (tenant, run_id, step, decided_at);

-- Who started the run whose step asks for approval: the token's name for a
-- run started through the approvals service, the user for the CLI.
ALTER TABLE approvals ADD COLUMN requested_by text NOT NULL DEFAULT '';

-- Set by the run when it resolves a step otherwise than its decision of
-- record (the deadline came before the decision reached the run). A decision
-- of record can only be accepted while the row is pending, under the row's
-- lock, so the run's resolution always sees it.
ALTER TABLE approvals ADD COLUMN decision_mismatch boolean NOT NULL DEFAULT false;

-- The approvals service's lists: decided steps newest first, and the rare
-- mismatches.
CREATE INDEX approvals_decided_idx ON approvals (tenant, decided_at DESC)
    WHERE state <> 'pending' AND NOT decision_mismatch;
CREATE INDEX approvals_mismatch_idx ON approvals (tenant, requested_at) WHERE decision_mismatch;
CREATE INDEX approvals_pending_deadline_idx ON approvals (tenant, deadline) WHERE state = 'pending';
CREATE INDEX approval_decisions_recent_idx ON approval_decisions (tenant, decided_at) WHERE outcome = 'accepted';

---- create above / drop below ----

DROP INDEX approval_decisions_recent_idx;
DROP INDEX approvals_pending_deadline_idx;
DROP INDEX approvals_mismatch_idx;
DROP INDEX approvals_decided_idx;
ALTER TABLE approvals DROP COLUMN decision_mismatch;
ALTER TABLE approvals DROP COLUMN requested_by;
DROP TABLE approval_decisions;
