-- traceparent: the trace context of the run at the moment it asked for
-- approval (W3C traceparent; empty when the worker did not trace). A
-- decision's request, a trace of its own, links to it, so that a tracing
-- backend joins the person's click to the run that waited for it.
ALTER TABLE approvals ADD COLUMN traceparent text NOT NULL DEFAULT ''
    CHECK (length(traceparent) <= 256);

-- lineage and parent_goal: for a step of a child run (a sub-agent's), the
-- runs and steps from the first run of the tree down to the step that
-- started the child ([{"run_id": "r1", "step": 3}]), and the parent run's
-- goal, shown beside the child's in the inbox. Empty for a run a person
-- started.
ALTER TABLE approvals ADD COLUMN lineage jsonb NOT NULL DEFAULT '[]'
    CHECK (jsonb_typeof(lineage) = 'array');
ALTER TABLE approvals ADD COLUMN parent_goal text NOT NULL DEFAULT '';

---- create above / drop below ----

ALTER TABLE approvals DROP COLUMN parent_goal;
ALTER TABLE approvals DROP COLUMN lineage;
ALTER TABLE approvals DROP COLUMN traceparent;
