-- One intent, one effect per run tree. A tool that makes each intent once
-- per run (keyed and external tools unless Repeatable) makes it once per
-- tree of runs: a run and its child runs, and theirs. Two runs of a tree
-- that run at the same time (two children of one parallel turn, or a
-- parent's step beside its child) claim the intent here, by the tree's
-- first run, the tool and the arguments' hash: exactly one claim holds it,
-- and the other step is a duplicate of the holder's.
--
-- A natural or keyed step's claim commits in its effect's transaction, so
-- a claim of such a tool means its effect exists. An external step claims
-- before its call, and gives the claim up when the call is refused before
-- any effect; key names the holder's key, whose row tells where its call
-- stands.
CREATE TABLE tree_intents (
    tenant     text        NOT NULL,
    tree       text        NOT NULL,
    tool       text        NOT NULL,
    args_hash  text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    run_id     text        NOT NULL,
    step       bigint      NOT NULL CHECK (step >= 1),
    key        text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, tree, tool, args_hash)
);

CREATE INDEX tree_intents_key_idx ON tree_intents (tenant, key);

---- create above / drop below ----

DROP TABLE tree_intents;
