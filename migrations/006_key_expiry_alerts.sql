-- Alerts of the expiry watchdog: a key whose retention ran out while its run
-- was still open. Each row is one policy action on one key: holding a key
-- (its expiry extended) or pruning it. The watchdog writes the row in the
-- transaction that acts on the key, so an alert exists exactly when the
-- action happened.
CREATE TABLE key_expiry_alerts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    key         text        NOT NULL,
    run_id      text        NOT NULL,
    step        bigint      NOT NULL,
    tool        text        NOT NULL,
    policy      text        NOT NULL CHECK (policy IN ('hold', 'prune')),
    run_state   text        NOT NULL,
    key_state   text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expired_at  timestamptz NOT NULL,
    raised_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- The expiry the key had when the alert was raised: one alert per key,
    -- policy action and expiry, however many watchdogs look at once.
    CONSTRAINT key_expiry_alerts_once UNIQUE (tenant, key, policy, expired_at)
);

CREATE INDEX key_expiry_alerts_raised_idx ON key_expiry_alerts (raised_at);

---- create above / drop below ----

DROP TABLE key_expiry_alerts;
