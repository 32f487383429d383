-- Steps waiting for, or decided by, a human. The run's workflow writes the
-- row when it pauses and updates it when the step is decided or its deadline
-- passes; the workflow's own state stays the source of truth, this table is
-- what inboxes and `oncerun approvals` list.
CREATE TABLE approvals (
    tenant       text        NOT NULL,
    run_id       text        NOT NULL,
    step         bigint      NOT NULL CHECK (step >= 1),
    tool         text        NOT NULL,
    args         jsonb       NOT NULL,
    args_hash    text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    goal         text        NOT NULL DEFAULT '',
    reason       text        NOT NULL DEFAULT '',
    state        text        NOT NULL DEFAULT 'pending'
                             CHECK (state IN ('pending', 'approved', 'rejected', 'expired')),
    requested_at timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    decided_by   text,
    decided_at   timestamptz,
    comment      text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id, step),
    CONSTRAINT approvals_decision_columns CHECK (
        (state = 'pending') = (decided_at IS NULL)
    )
);

-- Inboxes list a tenant's pending steps, oldest first.
CREATE INDEX approvals_pending_idx ON approvals (tenant, requested_at) WHERE state = 'pending';

---- create above / drop below ----

DROP TABLE approvals;
