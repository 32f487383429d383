-- Questions a tool's server asks a person in the middle of a call (an MCP
-- server's elicitation): the step waits for an answer as it would for an
-- approval. A step can be asked more than once (each answer sends the call
-- again, and the server may ask again): round counts the rounds, one row
-- each. A round holds every question the server asked at once (items: a
-- JSON array of {id, mode, message, schema, url}).
--
-- live is set on a question the server asked over a live session
-- (elicitation/create in the middle of the call): only the worker that
-- holds the session can give the server its answer, so the round is lost
-- if that worker dies before it is answered. Otherwise the question came
-- back as the call's answer (an input-required result) and the run waits
-- for it durably, for days if need be.
--
-- ask_id names the request that asked, so that a retried request finds
-- the round it recorded instead of numbering another.
CREATE TABLE questions (
    tenant       text        NOT NULL,
    run_id       text        NOT NULL,
    step         bigint      NOT NULL CHECK (step >= 1),
    round        integer     NOT NULL CHECK (round >= 1),
    ask_id       text        NOT NULL,
    tool         text        NOT NULL,
    key          text        NOT NULL,
    server       text        NOT NULL DEFAULT '',
    args         jsonb       NOT NULL,
    args_hash    text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    goal         text        NOT NULL DEFAULT '',
    items        jsonb       NOT NULL CHECK (jsonb_typeof(items) = 'array'),
    live         boolean     NOT NULL DEFAULT false,
    -- answer_by names the people (their tokens' names) who may answer;
    -- empty: any approver or operator of the tenant.
    answer_by    jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(answer_by) = 'array'),
    requested_by text        NOT NULL DEFAULT '',
    lineage      jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(lineage) = 'array'),
    parent_goal  text        NOT NULL DEFAULT '',
    state        text        NOT NULL DEFAULT 'pending'
                             CHECK (state IN ('pending', 'answered', 'expired', 'cancelled', 'lost')),
    requested_at timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    -- What became of the round: who answered and what (answers: {id:
    -- {action, content}}), or, for expired, cancelled and lost, why.
    answered_by  text,
    answered_at  timestamptz,
    answers      jsonb,
    note         text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id, step, round),
    CONSTRAINT questions_outcome_columns CHECK ((state = 'pending') = (answered_at IS NULL))
);

CREATE UNIQUE INDEX questions_ask_idx ON questions (tenant, run_id, step, ask_id);
CREATE INDEX questions_pending_idx ON questions (tenant, deadline, run_id, step) WHERE state = 'pending';

-- Every answer sent through the approvals service or the CLI, accepted or
-- refused, as approval_decisions keeps decisions: one accepted answer per
-- round is the answer of record.
CREATE TABLE question_answers (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant      text        NOT NULL,
    run_id      text        NOT NULL,
    step        bigint      NOT NULL CHECK (step >= 1),
    round       integer     NOT NULL CHECK (round >= 0),
    answers     jsonb,
    outcome     text        NOT NULL
                            CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'not_pending', 'forbidden', 'invalid')),
    answerer    text        NOT NULL,
    role        text        NOT NULL,
    note        text        NOT NULL DEFAULT '',
    remote_addr text        NOT NULL,
    user_agent  text        NOT NULL DEFAULT '',
    via         text        NOT NULL CHECK (via IN ('api', 'inbox', 'cli')),
    detail      text        NOT NULL DEFAULT '',
    answered_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT question_answers_accepted_answers CHECK (outcome <> 'accepted' OR answers IS NOT NULL)
);

CREATE UNIQUE INDEX question_answers_accepted_idx ON question_answers (tenant, run_id, step, round)
    WHERE outcome = 'accepted';
CREATE INDEX question_answers_step_idx ON question_answers (tenant, run_id, step, answered_at);

---- create above / drop below ----

DROP TABLE question_answers;
DROP TABLE questions;
