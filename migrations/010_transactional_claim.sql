-- The transactional path (Store.Do) claims a key in the round trip that
-- begins its transaction: BEGIN and a call of this function travel as one
-- simple query. The function holds a transaction-level advisory lock on the
-- key, so a concurrent duplicate waits here, before its effect runs, until
-- the first transaction ends; then, in a statement with a new snapshot, it
-- finds the key's row if the first one committed. A key that has a row is
-- refused with SQLSTATE OC409, which aborts the transaction before any
-- effect: the caller rolls back, reads the row and replays or reports it.
-- The key's row itself is written once, completed, with the effect's result,
-- in the statement pipelined with the COMMIT; a row that another caller
-- committed meanwhile makes that insert fail on the primary key.
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

-- The arguments hash is 64 lower-case hex digits. The regular expression
-- '^[0-9a-f]{64}$' said so at about 16 µs of server CPU per row, more than
-- the rest of a key row's insert; a length and a negated character class
-- say the same for about 1.5 µs.
-- NOT VALID: the new check applies to every row written from now on, and
-- migration 011 validates the rows already there under a lock that lets
-- calls go on; checking them here would hold every call of a large table
-- for the length of a scan.
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_args_hash_check,
    ADD CONSTRAINT idempotency_keys_args_hash_check
        CHECK (length(args_hash) = 64 AND args_hash !~ '[^0123456789abcdef]') NOT VALID;

---- create above / drop below ----

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_args_hash_check,
    ADD CONSTRAINT idempotency_keys_args_hash_check CHECK (args_hash ~ '^[0-9a-f]{64}$');
DROP FUNCTION idempotency_claim_in_tx(text, text);
