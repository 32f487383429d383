-- Orders of the demo shop, read by the lookup_order tool. The rows below are
-- the demo data of tenant "acme" that the README and `make demo` use; a real
-- deployment reads its own order system instead.
CREATE TABLE orders (
    tenant       text        NOT NULL,
    order_id     text        NOT NULL,
    customer     text        NOT NULL,
    status       text        NOT NULL,
    total_cents  bigint      NOT NULL CHECK (total_cents >= 0),
    currency     text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    placed_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, order_id)
);

INSERT INTO orders (tenant, order_id, customer, status, total_cents, currency, placed_at) VALUES
    ('acme', '1001', 'Ada Byron',      'delivered_damaged', 25900, 'EUR', '2026-11-20T10:00:00Z'),
    ('acme', '1002', 'Grace Hopper',   'delivered',          4900, 'EUR', '2026-11-21T12:30:00Z'),
    ('acme', '1003', 'Alan Turing',    'lost_in_transit',    8900, 'EUR', '2026-11-22T09:15:00Z');

---- create above / drop below ----

DROP TABLE orders;
