-- Money limits across runs (internal/spend owns these tables).
--
-- spend_caps: an operator's cap on what a tenant's tools may spend in one
-- currency per UTC day or per rolling 24 hours. A cap names one tool or a
-- group of tools; a call counts against every cap that names its tool.
CREATE TABLE spend_caps (
    tenant     text        NOT NULL,
    name       text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    tools      text[]      NOT NULL CHECK (cardinality(tools) BETWEEN 1 AND 64),
    currency   text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount     bigint      NOT NULL CHECK (amount > 0),
    period     text        NOT NULL CHECK (period IN ('utc_day', 'rolling_24h')),
    updated_by text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (tenant, name)
);

-- spend_entries: what each step counted, one row per step key and
-- currency. A database tool's row is written 'applied' in the transaction
-- of its effect; an external tool's is 'reserved' before the call is sent
-- and becomes 'applied' or 'released' with the outcome. A row that is not
-- released counts against the caps and the run's budget.
CREATE TABLE spend_entries (
    tenant     text        NOT NULL,
    key        text        NOT NULL,
    currency   text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    run_id     text        NOT NULL,
    -- budget_run is the run whose budget the entry counts against.
    budget_run text        NOT NULL,
    step       bigint      NOT NULL CHECK (step >= 1),
    tool       text        NOT NULL,
    amount     bigint      NOT NULL CHECK (amount >= 0),
    state      text        NOT NULL CHECK (state IN ('reserved', 'applied', 'released')),
    -- exception: an approver let the call past a limit it would cross.
    exception  boolean     NOT NULL DEFAULT false,
    counted_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    settled_at timestamptz,
    PRIMARY KEY (tenant, key, currency)
);

-- A cap's total: the entries of its tools in its currency within its window.
CREATE INDEX spend_entries_window_idx ON spend_entries (tenant, tool, currency, counted_at) INCLUDE (amount, state)
    WHERE state <> 'released';
-- A run's total, against its budget.
CREATE INDEX spend_entries_run_idx ON spend_entries (tenant, budget_run, currency) INCLUDE (amount, state)
    WHERE state <> 'released';

-- spend_alerts: each alert at 80% and at 100% of a cap, once per window
-- (the UTC day, or 24 hours from the alert for a rolling cap).
CREATE TABLE spend_alerts (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text        NOT NULL,
    cap          text        NOT NULL,
    threshold    integer     NOT NULL CHECK (threshold IN (80, 100)),
    currency     text        NOT NULL,
    spent        bigint      NOT NULL,
    amount       bigint      NOT NULL,
    fired_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    delivered_at timestamptz
);

CREATE INDEX spend_alerts_cap_idx ON spend_alerts (tenant, cap, threshold, fired_at);

-- spend_charge counts one step's amount in one currency against the caps
-- that name its tool and against the run's budget (p_budget, NULL for
-- none), in the caller's transaction. It locks the run's budget (an
-- advisory lock on tenant and budget run) and then each cap, in name
-- order, so that every charge of a cap is serialised and each total below
-- is read after the charges before it committed. A step whose key already
-- has a row that is not released counts nothing again (already). With
-- p_enforce and without p_exception, a charge that would take any limit past its amount is not
-- written: its rows say over. One row per limit: the run's budget has
-- cap = ''.
CREATE FUNCTION spend_charge(
    p_tenant text, p_key text, p_currency text, p_run text, p_budget_run text, p_step bigint, p_tool text,
    p_amount bigint, p_budget bigint, p_exception boolean, p_enforce boolean, p_state text)
RETURNS TABLE (cap text, period text, tools text, cap_amount bigint, spent bigint, over boolean, already boolean, alert integer,
               alert_id bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    c record;
    prior text;
    used bigint;
    since timestamptz;
    refused boolean := false;
    names text[] := ARRAY[]::text[];
    periods text[] := ARRAY[]::text[];
    groups text[] := ARRAY[]::text[];
    amounts bigint[] := ARRAY[]::bigint[];
    useds bigint[] := ARRAY[]::bigint[];
    sinces timestamptz[] := ARRAY[]::timestamptz[];
    alerts integer[] := ARRAY[]::integer[];
    alert_ids bigint[] := ARRAY[]::bigint[];
    aid bigint;
    i integer;
    n integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('spend/' || p_tenant || '/' || p_budget_run, 1330015));
    SELECT e.state INTO prior FROM spend_entries e
    WHERE e.tenant = p_tenant AND e.key = p_key AND e.currency = p_currency FOR UPDATE;
    IF prior IS NOT NULL AND prior <> 'released' THEN
        RETURN QUERY SELECT ''::text, ''::text, ''::text, 0::bigint, 0::bigint, false, true, 0, 0::bigint;
        RETURN;
    END IF;
    IF p_budget IS NOT NULL THEN
        SELECT coalesce(sum(e.amount), 0) INTO used FROM spend_entries e
        WHERE e.tenant = p_tenant AND e.budget_run = p_budget_run AND e.currency = p_currency AND e.state <> 'released';
        names := names || ''::text; periods := periods || 'run'::text; groups := groups || ''::text;
        amounts := amounts || p_budget; useds := useds || used; sinces := sinces || NULL::timestamptz;
    END IF;
    -- Each statement of this volatile function reads with a new snapshot:
    -- a cap's total is read after its lock, so it holds every charge that
    -- locked the cap before this one and committed.
    FOR c IN SELECT s.name, s.period, s.tools, s.amount FROM spend_caps s
             WHERE s.tenant = p_tenant AND s.currency = p_currency AND p_tool = ANY (s.tools)
             ORDER BY s.name FOR UPDATE LOOP
        since := CASE c.period
            WHEN 'utc_day' THEN date_trunc('day', statement_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
            ELSE statement_timestamp() - interval '24 hours' END;
        SELECT coalesce(sum(e.amount), 0) INTO used FROM spend_entries e
        WHERE e.tenant = p_tenant AND e.tool = ANY (c.tools) AND e.currency = p_currency
          AND e.counted_at >= since AND e.state <> 'released';
        names := names || c.name; periods := periods || c.period; groups := groups || array_to_string(c.tools, ',');
        amounts := amounts || c.amount; useds := useds || used; sinces := sinces || since;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(names, 1), 0) LOOP
        refused := refused OR useds[i] + p_amount > amounts[i];
        alerts := alerts || 0;
        alert_ids := alert_ids || 0::bigint;
    END LOOP;
    IF NOT (refused AND p_enforce AND NOT p_exception) THEN
        INSERT INTO spend_entries AS e (tenant, key, currency, run_id, budget_run, step, tool, amount, state, exception, settled_at)
        VALUES (p_tenant, p_key, p_currency, p_run, p_budget_run, p_step, p_tool, p_amount, p_state, p_exception,
                CASE WHEN p_state = 'applied' THEN statement_timestamp() END)
        ON CONFLICT (tenant, key, currency) DO UPDATE
            SET amount = EXCLUDED.amount, state = EXCLUDED.state, exception = EXCLUDED.exception,
                counted_at = statement_timestamp(), settled_at = EXCLUDED.settled_at;
        -- The alerts this charge raises: 80% and 100% of a cap, once a
        -- window (its UTC day, or 24 hours for a rolling cap). The cap's
        -- lock serialises them.
        FOR i IN 1 .. coalesce(array_length(names, 1), 0) LOOP
            CONTINUE WHEN names[i] = '';
            -- A charge that crosses both records both, and reports 100.
            FOREACH n IN ARRAY ARRAY[80, 100] LOOP
                CONTINUE WHEN (useds[i] + p_amount) * 100 < amounts[i] * n;
                IF NOT EXISTS (SELECT 1 FROM spend_alerts a
                    WHERE a.tenant = p_tenant AND a.cap = names[i] AND a.threshold = n AND a.fired_at >= sinces[i]) THEN
                    INSERT INTO spend_alerts (tenant, cap, threshold, currency, spent, amount)
                    VALUES (p_tenant, names[i], n, p_currency, useds[i] + p_amount, amounts[i])
                    RETURNING id INTO aid;
                    alerts[i] := n;
                    alert_ids[i] := aid;
                END IF;
            END LOOP;
        END LOOP;
    END IF;
    FOR i IN 1 .. coalesce(array_length(names, 1), 0) LOOP
        cap := names[i]; period := periods[i]; tools := groups[i]; cap_amount := amounts[i];
        spent := useds[i]; over := useds[i] + p_amount > amounts[i]; already := false; alert := alerts[i];
        alert_id := alert_ids[i];
        RETURN NEXT;
    END LOOP;
END
$$;

-- A step parked at a limit waits for approval like any other; its
-- approvals row says why (kind = 'limit'). A step approved under its
-- tool's rule that then meets a limit waits again, in a second round of
-- the same row: round counts them, and each round has its own decision of
-- record. An approve of a limit's round lets the step past the limit, an
-- exception, and its decision says so.
ALTER TABLE approvals ADD COLUMN kind text NOT NULL DEFAULT 'rule' CHECK (kind IN ('rule', 'limit'));
ALTER TABLE approvals ADD COLUMN round integer NOT NULL DEFAULT 1 CHECK (round >= 1);
ALTER TABLE approval_decisions ADD COLUMN round integer NOT NULL DEFAULT 1 CHECK (round >= 1);
ALTER TABLE approval_decisions ADD COLUMN exception boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX approval_decisions_accepted_round_idx ON approval_decisions (tenant, run_id, step, round)
    WHERE outcome = 'accepted';
DROP INDEX approval_decisions_accepted_idx;

---- create above / drop below ----

DELETE FROM approval_decisions WHERE round > 1;
CREATE UNIQUE INDEX approval_decisions_accepted_idx ON approval_decisions (tenant, run_id, step)
    WHERE outcome = 'accepted';
DROP INDEX approval_decisions_accepted_round_idx;
ALTER TABLE approval_decisions DROP COLUMN exception;
ALTER TABLE approval_decisions DROP COLUMN round;
ALTER TABLE approvals DROP COLUMN round;
ALTER TABLE approvals DROP COLUMN kind;
DROP FUNCTION spend_charge(text, text, text, text, text, bigint, text, bigint, bigint, boolean, boolean, text);
DROP TABLE spend_alerts;
DROP TABLE spend_entries;
DROP TABLE spend_caps;
