-- Every decision request on a step of the tenant leaves a row, whatever is
-- wrong with it: a request whose values the service refuses (a malformed
-- args hash, a comment with control characters, a body that is not JSON) is
-- recorded as "invalid", with what the client sent escaped and cut to fit.
-- Such a request may name no decision at all (a form whose decision field
-- was tampered with): its decision is then ''. detail says why a request was
-- refused.
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_outcome_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_outcome_check
    CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'args_mismatch', 'not_pending', 'forbidden', 'invalid'));
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_decision_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_decision_check
    CHECK (decision IN ('approve', 'reject') OR (decision = '' AND outcome = 'invalid'));
ALTER TABLE approval_decisions ADD COLUMN detail text NOT NULL DEFAULT '';

---- create above / drop below ----

DELETE FROM approval_decisions WHERE outcome = 'invalid';
ALTER TABLE approval_decisions DROP COLUMN detail;
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_decision_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_decision_check
    CHECK (decision IN ('approve', 'reject'));
ALTER TABLE approval_decisions DROP CONSTRAINT approval_decisions_outcome_check;
ALTER TABLE approval_decisions ADD CONSTRAINT approval_decisions_outcome_check
    CHECK (outcome IN ('accepted', 'repeated', 'conflict', 'args_mismatch', 'not_pending', 'forbidden'));
