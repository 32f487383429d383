-- handle: what an external call recorded of an effect still in progress at
-- its provider (an MCP server's task: its id, and the session that can
-- read it), written under the call's lease once the provider answered with
-- it. A later attempt whose outcome is unknown follows the handle to the
-- effect's end rather than sending the call again. It is cleared when an
-- attempt fails before its effect, so that a new attempt starts afresh.
ALTER TABLE idempotency_keys ADD COLUMN handle jsonb;

---- create above / drop below ----

ALTER TABLE idempotency_keys DROP COLUMN handle;
