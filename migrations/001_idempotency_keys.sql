-- The dedup store: one row per side-effecting tool call, keyed by tenant and
-- idempotency key. The primary key is the claim: an INSERT that conflicts on
-- it is a duplicate, whatever state the first caller is in.
CREATE TABLE idempotency_keys (
    tenant       text        NOT NULL,
    key          text        NOT NULL,
    run_id       text        NOT NULL,
    step         bigint      NOT NULL CHECK (step >= 1),
    tool         text        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('in_flight', 'completed', 'failed')),
    args_hash    text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    result       jsonb,
    failure      jsonb,
    lease_owner  text,
    lease_expiry timestamptz,
    attempts     integer     NOT NULL DEFAULT 1 CHECK (attempts >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, key),
    -- Each state carries exactly the columns that describe it.
    CONSTRAINT idempotency_keys_state_columns CHECK (
        CASE state
            WHEN 'in_flight' THEN lease_owner IS NOT NULL AND lease_expiry IS NOT NULL
                AND result IS NULL AND completed_at IS NULL
            WHEN 'completed' THEN result IS NOT NULL AND completed_at IS NOT NULL
                AND failure IS NULL
            WHEN 'failed' THEN failure IS NOT NULL AND result IS NULL
        END
    )
)
-- Room on each page for the completion's new row version, so that the
-- in_flight -> completed update is HOT and writes no index entries.
WITH (fillfactor = 70);

-- The pruner walks keys in expiry order.
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- Status pages and the watchdog look keys up by run. run_id leads so that no
-- index but the primary key starts with tenant: on a new, empty table the
-- planner would otherwise cache a generic plan for the hot path's
-- "tenant = $1 AND key = $2" that walks this index over the whole tenant.
CREATE INDEX idempotency_keys_run_idx ON idempotency_keys (run_id, tenant, step);

-- The transactional path sends its completion and COMMIT in one pipelined
-- batch. Casting the completion's returned result to this domain turns "no row
-- was completed" into an error on the server, which aborts the transaction
-- before the COMMIT can make the effect durable without its key.
CREATE DOMAIN idempotency_completed_result AS jsonb NOT NULL;

---- create above / drop below ----

DROP DOMAIN idempotency_completed_result;
DROP TABLE idempotency_keys;
