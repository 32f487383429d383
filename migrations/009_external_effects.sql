-- External effects: steps whose outcome nobody could tell, the decisions
-- people make about them, the follow-on messages of database effects, and
-- what reconciliation found.

-- A step of an external tool whose outcome is unknown (the provider may or
-- may not have applied it, and the paired read could not tell) waits here
-- for a person's resolve. A step can need resolution more than once (a
-- "not_applied" answer retries it, and the retry's outcome may be unknown
-- again): round counts them.
CREATE TABLE resolutions (
    tenant       text        NOT NULL,
    run_id       text        NOT NULL,
    step         bigint      NOT NULL CHECK (step >= 1),
    round        integer     NOT NULL CHECK (round >= 1),
    tool         text        NOT NULL,
    key          text        NOT NULL,
    args         jsonb       NOT NULL,
    args_hash    text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    goal         text        NOT NULL DEFAULT '',
    -- first_sent_at is when the step's first attempt began; known is what
    -- oncerun knows of the outcome (the failure it met, the paired read's
    -- answer).
    first_sent_at timestamptz NOT NULL,
    known        text        NOT NULL DEFAULT '',
    state        text        NOT NULL DEFAULT 'pending'
                             CHECK (state IN ('pending', 'applied', 'not_applied')),
    requested_at timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    resolved_by  text,
    resolved_at  timestamptz,
    result       jsonb,
    note         text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id, step, round),
    CONSTRAINT resolutions_decision_columns CHECK ((state = 'pending') = (resolved_at IS NULL))
);

CREATE INDEX resolutions_pending_idx ON resolutions (tenant, requested_at) WHERE state = 'pending';

-- Every resolve request on a step of the tenant, accepted or refused, as
-- approval_decisions keeps approvals: one accepted decision per round.
CREATE TABLE resolution_decisions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    run_id      text        NOT NULL,
    step        bigint      NOT NULL CHECK (step >= 1),
    round       integer     NOT NULL CHECK (round >= 0),
    decision    text        NOT NULL CHECK (decision IN ('applied', 'not_applied', '')),
    outcome     text        NOT NULL
                            CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'not_pending', 'forbidden', 'invalid')),
    result      jsonb,
    resolver    text        NOT NULL,
    role        text        NOT NULL,
    note        text        NOT NULL DEFAULT '',
    remote_addr text        NOT NULL,
    user_agent  text        NOT NULL DEFAULT '',
    via         text        NOT NULL CHECK (via IN ('api', 'inbox', 'cli')),
    detail      text        NOT NULL DEFAULT '',
    decided_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT resolution_decisions_decision_check2 CHECK (decision <> '' OR outcome = 'invalid')
);

CREATE UNIQUE INDEX resolution_decisions_accepted_idx ON resolution_decisions (tenant, run_id, step, round)
    WHERE outcome = 'accepted';

-- Follow-on messages of a database effect: written in the effect's
-- transaction, so they commit or vanish with it; delivered afterwards by the
-- run, each as an external effect under its own key (key). state is where
-- delivery stands: pending until the run delivers it, delivered, unknown
-- (the receiver may have it; it is never resent without a person), failed
-- (refused for good).
CREATE TABLE outbox (
    tenant       text        NOT NULL,
    run_id       text        NOT NULL,
    step         bigint      NOT NULL CHECK (step >= 1),
    seq          integer     NOT NULL CHECK (seq >= 1),
    key          text        NOT NULL,
    tool         text        NOT NULL,
    args         jsonb       NOT NULL,
    args_hash    text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    state        text        NOT NULL DEFAULT 'pending'
                             CHECK (state IN ('pending', 'delivered', 'unknown', 'failed')),
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    delivered_at timestamptz,
    result       jsonb,
    detail       text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id, step, seq)
);

CREATE UNIQUE INDEX outbox_key_idx ON outbox (tenant, key);
CREATE INDEX outbox_undelivered_idx ON outbox (created_at) WHERE state <> 'delivered';

-- What reconciliation found when it compared oncerun's record of external
-- effects with the providers' ledgers. A finding stays until a person
-- acknowledges it; a later pass never records the same finding twice.
CREATE TABLE reconciliation_findings (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text        NOT NULL
                            CHECK (kind IN ('under_recorded', 'over_recorded', 'amount_mismatch', 'undelivered')),
    tenant      text        NOT NULL,
    tool        text        NOT NULL,
    key         text        NOT NULL,
    run_id      text        NOT NULL DEFAULT '',
    step        bigint      NOT NULL DEFAULT 0,
    provider_id text        NOT NULL DEFAULT '',
    -- amount is the drift in integer minor units of currency: what the
    -- provider holds and we do not, or the difference.
    amount      bigint      NOT NULL DEFAULT 0,
    currency    text        NOT NULL DEFAULT '',
    ours        jsonb,
    theirs      jsonb,
    detail      text        NOT NULL DEFAULT '',
    effect_at   timestamptz NOT NULL,
    found_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    acked_at    timestamptz,
    acked_by    text,
    ack_note    text        NOT NULL DEFAULT '',
    CONSTRAINT reconciliation_findings_ack_columns CHECK ((acked_at IS NULL) = (acked_by IS NULL))
);

CREATE UNIQUE INDEX reconciliation_findings_once_idx ON reconciliation_findings (kind, tenant, key);
CREATE INDEX reconciliation_findings_open_idx ON reconciliation_findings (tenant, tool, effect_at) WHERE acked_at IS NULL;

-- The demo shop's orders name the customer's e-mail address (credits are
-- announced by e-mail) and the payment a refund goes back to.
ALTER TABLE orders ADD COLUMN customer_email text NOT NULL DEFAULT '';
ALTER TABLE orders ADD COLUMN payment_id text NOT NULL DEFAULT '';
UPDATE orders SET customer_email = lower(split_part(customer, ' ', 1)) || '@example.com',
                  payment_id = 'pay_' || order_id
WHERE tenant = 'acme';

---- create above / drop below ----

ALTER TABLE orders DROP COLUMN payment_id;
ALTER TABLE orders DROP COLUMN customer_email;

DROP TABLE reconciliation_findings;
DROP TABLE outbox;
DROP TABLE resolution_decisions;
DROP TABLE resolutions;
