-- Notes on orders, the keyed example: nothing in a note identifies it, so a
-- note is made once only by the idempotency key row that commits with it.
CREATE TABLE order_notes (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text        NOT NULL,
    order_id        text        NOT NULL,
    body            text        NOT NULL CHECK (body <> ''),
    idempotency_key text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX order_notes_order_idx ON order_notes (tenant, order_id);

---- create above / drop below ----

DROP TABLE order_notes;
