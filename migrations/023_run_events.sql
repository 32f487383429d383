-- Each run's story as an ordered, durable log (docs/events.md): one row per
-- fact, written where the fact becomes true. A run writes its own facts
-- (started, a step proposed, running, done, the run ended); the tables below
-- write theirs by trigger, in the transaction that makes them true: an
-- effect applied with its key's completion, a decision with its audit row,
-- a question asked or answered with its row, an operator's request with
-- its audit row.
--
-- A child run's events go into its root run's log, so that following the
-- root shows the whole tree in one order. A root run's id never ends in
-- .<number> (workflows.RunInput.Validate), and a child's is its parent's
-- id and the delegating step's number (<run>.<step>), so the root of any
-- run is its id without its trailing .<number> parts.
CREATE TABLE run_events (
    tenant      text        NOT NULL,
    root_run_id text        NOT NULL,
    seq         bigint      NOT NULL CHECK (seq >= 1),
    run_id      text        NOT NULL,
    -- source names the fact, once per root run: a fact written again (a
    -- retried activity, a replayed workflow task, a trigger on a row
    -- written again) is not a second event.
    source      text        NOT NULL,
    step        bigint      CHECK (step >= 1),
    type        text        NOT NULL,
    data        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(data) = 'object'),
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- xid is the writing transaction's: the tenant's stream reads only the
    -- events of transactions that have ended (see internal/events).
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id(),
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (tenant, root_run_id, seq),
    UNIQUE (tenant, root_run_id, source)
);

CREATE INDEX run_events_tenant_idx ON run_events (tenant, xid, id);

-- The last offset of each root run's log. Its row lock orders the writers
-- of one log: an offset is taken and committed before the next is taken,
-- so a reader that has seen offset n has seen every offset below it.
CREATE TABLE run_event_heads (
    tenant      text   NOT NULL,
    root_run_id text   NOT NULL,
    last_seq    bigint NOT NULL,
    PRIMARY KEY (tenant, root_run_id)
);

-- One row per run (children included), kept by the run's own events: what
-- GET /v1/runs lists, by keyset on (created_at, run_id).
CREATE TABLE run_index (
    tenant        text        NOT NULL,
    run_id        text        NOT NULL,
    root_run_id   text        NOT NULL,
    parent_run_id text,
    state         text        NOT NULL,
    goal          text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, run_id)
);

CREATE INDEX run_index_list_idx ON run_index (tenant, created_at DESC, run_id DESC);
CREATE INDEX run_index_state_idx ON run_index (tenant, state, created_at DESC, run_id DESC);
-- A tree's rows, removed with its root's log (see internal/events.PruneEnded).
CREATE INDEX run_index_root_idx ON run_index (tenant, root_run_id);

-- oncerun_root_run returns the root of a run's tree (see above); most runs
-- are roots, without a dot, and take no regular expression.
CREATE FUNCTION oncerun_root_run(run text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT CASE WHEN strpos(run, '.') = 0 THEN run ELSE regexp_replace(run, '(\.[0-9]+)+$', '') END $$;

-- oncerun_emit appends one fact to its root run's log, unless the log holds
-- a fact of that source already, and wakes the log's followers. It returns
-- the event's offset, or NULL when the fact was there.
CREATE FUNCTION oncerun_emit(p_tenant text, p_run text, p_source text, p_step bigint, p_type text, p_data jsonb,
                             p_at timestamptz DEFAULT NULL) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    root text := oncerun_root_run(p_run);
    taken bigint;
BEGIN
    -- Taking the head's row lock first makes the check below see any
    -- writer of the same source that came first: it has committed. The
    -- head exists but for a log's first event.
    UPDATE run_event_heads SET last_seq = last_seq + 1 WHERE tenant = p_tenant AND root_run_id = root
        RETURNING last_seq INTO taken;
    IF NOT FOUND THEN
        INSERT INTO run_event_heads AS h (tenant, root_run_id, last_seq) VALUES (p_tenant, root, 1)
            ON CONFLICT (tenant, root_run_id) DO UPDATE SET last_seq = h.last_seq + 1
            RETURNING last_seq INTO taken;
    END IF;
    INSERT INTO run_events (tenant, root_run_id, seq, run_id, source, step, type, data, at)
        VALUES (p_tenant, root, taken, p_run, p_source, p_step, p_type, coalesce(p_data, '{}'),
                coalesce(p_at, clock_timestamp()))
        ON CONFLICT (tenant, root_run_id, source) DO NOTHING;
    IF NOT FOUND THEN
        -- The fact was there: give the offset back (the lock is held).
        UPDATE run_event_heads SET last_seq = last_seq - 1 WHERE tenant = p_tenant AND root_run_id = root;
        RETURN NULL;
    END IF;
    IF p_type = 'run.started' THEN
        INSERT INTO run_index (tenant, run_id, root_run_id, parent_run_id, state, goal, created_at, updated_at)
            VALUES (p_tenant, p_run, root, nullif(p_data->>'parent_run_id', ''), 'running',
                    coalesce(p_data->>'goal', ''), coalesce(p_at, clock_timestamp()), coalesce(p_at, clock_timestamp()))
            ON CONFLICT (tenant, run_id) DO NOTHING;
    ELSIF p_type IN ('run.paused', 'run.resumed', 'run.completed', 'run.failed', 'run.cancelled') THEN
        UPDATE run_index SET state = CASE p_type WHEN 'run.resumed' THEN 'running' ELSE substr(p_type, 5) END,
                             updated_at = coalesce(p_at, clock_timestamp())
            WHERE tenant = p_tenant AND run_id = p_run;
    END IF;
    -- chr(31) is in no tenant or run id (they are printable text).
    PERFORM pg_notify('oncerun_events', p_tenant || chr(31) || root);
    RETURN taken;
END
$$;

-- An effect applied: its key completed, in the effect's transaction.
CREATE FUNCTION oncerun_key_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'completed' AND (TG_OP = 'INSERT' OR OLD.state <> 'completed') THEN
        PERFORM oncerun_emit(NEW.tenant, NEW.run_id, 'key:' || NEW.key || ':applied', NEW.step, 'step.applied',
            jsonb_build_object('tool', NEW.tool, 'key', NEW.key, 'args_hash', NEW.args_hash, 'attempts', NEW.attempts,
                               'result_bytes', octet_length(NEW.result::text)));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER idempotency_keys_events AFTER INSERT OR UPDATE OF state ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION oncerun_key_event();

-- A decision of record, with who decided: approval.approved, approval.rejected,
-- approval.edited. The run tells when it applies it (step.approved …).
CREATE FUNCTION oncerun_decision_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.outcome = 'accepted' THEN
        PERFORM oncerun_emit(NEW.tenant, NEW.run_id, 'decision:' || NEW.id, NEW.step,
            CASE NEW.decision WHEN 'approve' THEN 'approval.approved' WHEN 'reject' THEN 'approval.rejected'
                              ELSE 'approval.edited' END,
            jsonb_build_object('by', NEW.approver, 'role', NEW.role, 'via', NEW.via, 'args_hash', NEW.args_hash,
                               'edited_args_hash', nullif(NEW.edited_args_hash, '')));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER approval_decisions_events AFTER INSERT ON approval_decisions
    FOR EACH ROW EXECUTE FUNCTION oncerun_decision_event();

-- A person's answer on an effect of unknown outcome.
CREATE FUNCTION oncerun_resolution_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.outcome = 'accepted' THEN
        PERFORM oncerun_emit(NEW.tenant, NEW.run_id, 'resolution:' || NEW.id, NEW.step, 'resolution.' || NEW.decision,
            jsonb_build_object('by', NEW.resolver, 'role', NEW.role, 'via', NEW.via));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER resolution_decisions_events AFTER INSERT ON resolution_decisions
    FOR EACH ROW EXECUTE FUNCTION oncerun_resolution_event();

-- A question asked of a person, and what became of it.
CREATE FUNCTION oncerun_question_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM oncerun_emit(NEW.tenant, NEW.run_id, 'question:' || NEW.step || ':' || NEW.round || ':asked', NEW.step,
            'question.asked', jsonb_build_object('tool', NEW.tool, 'round', NEW.round, 'live', NEW.live,
                                                 'items', jsonb_array_length(NEW.items), 'deadline', NEW.deadline));
    ELSIF NEW.state <> OLD.state THEN
        PERFORM oncerun_emit(NEW.tenant, NEW.run_id, 'question:' || NEW.step || ':' || NEW.round || ':' || NEW.state,
            NEW.step, 'question.' || NEW.state,
            jsonb_build_object('tool', NEW.tool, 'round', NEW.round, 'by', NEW.answered_by));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER questions_events AFTER INSERT OR UPDATE OF state ON questions
    FOR EACH ROW EXECUTE FUNCTION oncerun_question_event();

-- An operator's request the run accepted: cancel, pause, resume, message.
CREATE FUNCTION oncerun_control_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.outcome = 'accepted' THEN
        PERFORM oncerun_emit(NEW.tenant, NEW.run_id, 'control:' || NEW.id, NULL,
            CASE NEW.action WHEN 'message' THEN 'message.accepted' WHEN 'cancel' THEN 'run.cancelling'
                        ELSE 'run.' || NEW.action || '_requested' END,
            jsonb_build_object('by', NEW.actor, 'message_id', nullif(NEW.message_id, '')));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER run_controls_events AFTER INSERT ON run_controls
    FOR EACH ROW EXECUTE FUNCTION oncerun_control_event();

---- create above / drop below ----

DROP TRIGGER run_controls_events ON run_controls;
DROP TRIGGER questions_events ON questions;
DROP TRIGGER resolution_decisions_events ON resolution_decisions;
DROP TRIGGER approval_decisions_events ON approval_decisions;
DROP TRIGGER idempotency_keys_events ON idempotency_keys;
DROP FUNCTION oncerun_control_event();
DROP FUNCTION oncerun_question_event();
DROP FUNCTION oncerun_resolution_event();
DROP FUNCTION oncerun_decision_event();
DROP FUNCTION oncerun_key_event();
DROP FUNCTION oncerun_emit(text, text, text, bigint, text, jsonb, timestamptz);
DROP FUNCTION oncerun_root_run(text);
DROP TABLE run_index;
DROP TABLE run_event_heads;
DROP TABLE run_events;
