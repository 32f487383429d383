-- held_until: how long the worker that holds a live question's session is
-- known to be alive. The worker moves it on while it waits for the answer;
-- once it has passed, the worker is taken for gone (whatever step it ran,
-- and however its retries ended), and the round reads lost: the lists stop
-- offering it and an answer is refused. NULL on a durable round, and on a
-- live round recorded before this column: those lapse only with their
-- deadline.
ALTER TABLE questions ADD COLUMN held_until timestamptz;

---- create above / drop below ----

ALTER TABLE questions DROP COLUMN held_until;
