-- A cancel, pause, resume or message whose sender's role may not send it
-- (a viewer's, an approver's) is audited as 'forbidden', as decisions,
-- answers and resolutions are. A request naming a run the tenant does not
-- have leaves no row any more, so that nobody can fill the table with
-- made-up run ids; the 'not_found' rows of earlier releases stay.
ALTER TABLE run_controls DROP CONSTRAINT run_controls_outcome_check;
ALTER TABLE run_controls ADD CONSTRAINT run_controls_outcome_check
    CHECK (outcome IN ('accepted', 'repeated', 'refused', 'invalid', 'forbidden', 'not_found', 'unavailable'));

---- create above / drop below ----

-- The forbidden rows stay: the narrower check applies to new rows only.
ALTER TABLE run_controls DROP CONSTRAINT run_controls_outcome_check;
ALTER TABLE run_controls ADD CONSTRAINT run_controls_outcome_check
    CHECK (outcome IN ('accepted', 'repeated', 'refused', 'invalid', 'not_found', 'unavailable')) NOT VALID;
