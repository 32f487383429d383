-- Money limits fail closed (internal/spend): a call of a tool that a cap
-- covers, in a currency no cap of that tool names, waits for an approver
-- unless the cap says other_currencies = 'allow'. Caps set before this
-- migration take the default, 'park'.
ALTER TABLE spend_caps ADD COLUMN other_currencies text NOT NULL DEFAULT 'park'
    CHECK (other_currencies IN ('park', 'allow'));

---- create above / drop below ----

ALTER TABLE spend_caps DROP COLUMN other_currencies;
