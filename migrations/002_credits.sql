-- Store credits, the natural-key example: a credit for an order and a reason
-- is granted once, forever, whatever idempotency key asked for it. The unique
-- constraint is the dedup; idempotency_key records which call created the row.
CREATE TABLE credits (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text        NOT NULL,
    order_id        text        NOT NULL,
    reason          text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    currency        text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    idempotency_key text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT credits_natural_key UNIQUE (tenant, order_id, reason)
);

---- create above / drop below ----

DROP TABLE credits;
