-- The transactional path (Store.Do) claims a key in the round trip that
-- begins its transaction: BEGIN and a call of this function travel as one
-- simple query. The function holds a transaction-level advisory lock on the
-- key, so a concurrent duplicate waits here, before its effect runs, until
-- the first transaction ends; then, in a statement with a new snapshot, it
-- finds the key's row if the first one committed. A key that has a row is
-- refused with SQLSTATE OC409, which aborts the transaction before any
-- effect: the caller rolls back, reads the row and replays or reports it.
-- The key's row itself is written once, completed, with the effect's result,
-- in the statement pipelined with the COMMIT.
--
-- The lock is taken on a 64-bit hash of tenant and key; two keys whose
-- hashes collide only wait for each other. Callers that insert key rows
-- without the lock (the external path's in-flight claim) are caught by the
-- primary key when the completed row is inserted.
CREATE FUNCTION idempotency_claim_in_tx(p_tenant text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_tenant || '/' || p_key, 1330001));
    IF EXISTS (SELECT FROM idempotency_keys WHERE tenant = p_tenant AND key = p_key) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'OC409',
            MESSAGE = format('idempotency key %s of tenant %s is already recorded', p_key, p_tenant),
            HINT = 'Expected when a tool call is retried: oncerun reads the recorded call and replays it.';
    END IF;
END
$$;

---- create above / drop below ----

DROP FUNCTION idempotency_claim_in_tx(text, text);
