package approvalstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/questions"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// States of a questions row, as the table spells them.
const (
	QuestionPending  = "pending"
	QuestionAnswered = "answered"
	// QuestionExpired: nobody answered before the deadline.
	QuestionExpired = "expired"
	// QuestionCancelled: the run was cancelled while the question waited.
	QuestionCancelled = "cancelled"
	// QuestionLost: a live question whose worker died, or whose call
	// ended, before it was answered: its answer can no longer reach the
	// server.
	QuestionLost = "lost"
)

// QuestionRequest is a round of questions a tool's server asked during a
// step's call, as the step records it for a person.
type QuestionRequest struct {
	Tenant string `json:"tenant" db:"tenant"`
	RunID  string `json:"run_id" db:"run_id"`
	Step   int64  `json:"step" db:"step"`
	// AskID names the request that asked: a repeat of it finds the round
	// it recorded.
	AskID    string          `json:"ask_id" db:"ask_id"`
	Tool     string          `json:"tool" db:"tool"`
	Key      string          `json:"key" db:"key"`
	Server   string          `json:"server,omitempty" db:"server"`
	Args     json.RawMessage `json:"args" db:"args"`
	ArgsHash string          `json:"args_hash" db:"args_hash"`
	Goal     string          `json:"goal" db:"goal"`
	// Items are the questions of the round.
	Items []questions.Item `json:"items" db:"items"`
	// Live says the server asked over its live session: the answer must
	// reach the worker that holds it.
	Live bool `json:"live,omitempty" db:"live"`
	// AnswerBy names who may answer; empty: any approver or operator.
	AnswerBy    []string  `json:"answer_by,omitempty" db:"answer_by"`
	RequestedBy string    `json:"requested_by,omitempty" db:"requested_by"`
	Lineage     []Hop     `json:"lineage,omitempty" db:"lineage"`
	ParentGoal  string    `json:"parent_goal,omitempty" db:"parent_goal"`
	RequestedAt time.Time `json:"requested_at" db:"requested_at"`
	Deadline    time.Time `json:"deadline" db:"deadline"`
	// Hold, on a live round, is how long its worker is known to be alive
	// without renewing (see RenewLiveQuestion): past it, the round reads
	// lost. Zero: the round lapses only with its deadline.
	Hold time.Duration `json:"hold,omitempty" db:"-"`
}

// Question is a row of the questions table.
type Question struct {
	QuestionRequest
	Round int `db:"round"`
	// State is QuestionPending, QuestionAnswered, QuestionExpired,
	// QuestionCancelled or QuestionLost.
	State      string     `db:"state"`
	AnsweredBy string     `db:"answered_by"`
	AnsweredAt *time.Time `db:"answered_at"`
	// Answers are the answers the step took ({id: {action, content}}).
	Answers json.RawMessage `db:"answers"`
	// Note says why a round ended unanswered, or the answerer's note.
	Note string `db:"note"`
}

// Asked is the round as the step's questions.
func (q Question) Asked() questions.Asked {
	return questions.Asked{Server: q.Server, Items: q.Items, AnswerBy: q.AnswerBy}
}

// MayAnswer reports whether by may answer the round: anyone the role lets
// answer when the round names nobody, otherwise one of those it names.
func (q Question) MayAnswer(by string) bool {
	return len(q.AnswerBy) == 0 || slices.Contains(q.AnswerBy, by)
}

// AnswerRecord is a row of question_answers: one answer sent about a round
// of questions, accepted or refused. The accepted one is the round's
// answer of record.
type AnswerRecord struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	RunID  string `db:"run_id"`
	Step   int64  `db:"step"`
	Round  int    `db:"round"`
	// Answers are what the request answered, when they could be kept.
	Answers    json.RawMessage `db:"answers"`
	Outcome    string          `db:"outcome"`
	Answerer   string          `db:"answerer"`
	Role       string          `db:"role"`
	Note       string          `db:"note"`
	RemoteAddr string          `db:"remote_addr"`
	UserAgent  string          `db:"user_agent"`
	Via        string          `db:"via"`
	Detail     string          `db:"detail"`
	AnsweredAt time.Time       `db:"answered_at"`
}

// lapsedSQL holds, for questions q, when a live round is pending but its
// worker stopped renewing its hold: the worker is gone, and the round is
// lost, whether or not anything has written so yet. The database's clock
// decides, as it does for a key's lease.
const lapsedSQL = `(q.state = 'pending' AND q.live AND q.held_until <= statement_timestamp())`

// lapsedNote is what a lapsed round's note says.
const lapsedNote = "the worker that held the session with the server stopped renewing its hold before the question was answered: " +
	"its answer can no longer reach the server"

// questionColumns are the columns of a Question, from questions q. A
// lapsed round reads lost.
const questionColumns = `q.tenant, q.run_id, q.step, q.round, q.ask_id, q.tool, q.key, q.server, q.args, q.args_hash, q.goal,
    q.items, q.live, q.answer_by, q.requested_by, q.lineage, q.parent_goal, q.requested_at, q.deadline,
    CASE WHEN ` + lapsedSQL + ` THEN 'lost' ELSE q.state END AS state,
    coalesce(q.answered_by, '') AS answered_by, q.answered_at, q.answers,
    CASE WHEN ` + lapsedSQL + ` THEN '` + lapsedNote + `' ELSE q.note END AS note`

// answerColumns are the columns of an AnswerRecord.
const answerColumns = `id, tenant, run_id, step, round, answers, outcome, answerer, role, note, remote_addr, user_agent, via,
    detail, answered_at`

// recordQuestionSQL numbers and writes a round of questions, or finds the
// one its ask id wrote.
const recordQuestionSQL = `
WITH ins AS (
    INSERT INTO questions (tenant, run_id, step, round, ask_id, tool, key, server, args, args_hash, goal, items, live, answer_by,
        requested_by, lineage, parent_goal, requested_at, deadline, held_until)
    SELECT $1, $2, $3, coalesce(max(round), 0) + 1, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
        CASE WHEN $12 AND $19::float8 > 0 THEN statement_timestamp() + make_interval(secs => $19::float8) END
    FROM questions WHERE tenant = $1 AND run_id = $2 AND step = $3
    ON CONFLICT (tenant, run_id, step, ask_id) DO NOTHING
    RETURNING round)
SELECT round FROM ins
UNION ALL
SELECT round FROM questions WHERE tenant = $1 AND run_id = $2 AND step = $3 AND ask_id = $4
LIMIT 1`

// maxNumbering bounds the attempts at numbering a round.
const maxNumbering = 16

// RecordQuestion writes the pending round of q and returns its number, the
// step's next. A repeat of q's AskID finds the round it wrote and changes
// nothing.
func RecordQuestion(ctx context.Context, db DB, q QuestionRequest) (int, error) {
	items, err := json.Marshal(q.Items)
	if err != nil {
		return 0, fmt.Errorf("record the questions of step %d of run %s: %w", q.Step, q.RunID, err)
	}
	answerBy := q.AnswerBy
	if answerBy == nil {
		answerBy = []string{}
	}
	args := []any{q.Tenant, q.RunID, q.Step, q.AskID, q.Tool, q.Key, q.Server, q.Args, q.ArgsHash, storable(q.Goal), items, q.Live,
		answerBy, storable(q.RequestedBy), lineage(q.Lineage), storable(q.ParentGoal), q.RequestedAt, q.Deadline, q.Hold.Seconds()}
	var round int
	// A step asks one round at a time; rounds of one step recorded at the
	// same moment (a worker's live question as another's attempt
	// records its own) take numbers in turn.
	for range maxNumbering {
		err = db.QueryRow(ctx, recordQuestionSQL, args...).Scan(&round)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			// Another round of the step took the number at the same
			// moment: number again.
			continue
		}
		break
	}
	if err != nil {
		return 0, fmt.Errorf("record the questions of step %d of run %s: %w", q.Step, q.RunID, err)
	}
	return round, nil
}

const recordQuestionOutcomeSQL = `
UPDATE questions SET state = $5, answered_by = nullif($6, ''), answered_at = $7, answers = $8, note = $9
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND state = 'pending'`

// QuestionOutcome is what became of a round of questions.
type QuestionOutcome struct {
	Tenant string
	RunID  string
	Step   int64
	Round  int
	// State is QuestionAnswered, QuestionExpired, QuestionCancelled or
	// QuestionLost.
	State string
	// By answered (or, for a cancelled round, cancelled the run).
	By      string
	At      time.Time
	Answers questions.Answers
	Note    string
}

// RecordQuestionOutcome records what became of a pending round. It
// reports whether the round was pending; one that is not is left as it
// was.
func RecordQuestionOutcome(ctx context.Context, db DB, o QuestionOutcome) (bool, error) {
	var answers any
	if o.Answers != nil {
		raw, err := json.Marshal(o.Answers)
		if err != nil {
			return false, err
		}
		answers = raw
	}
	tag, err := db.Exec(ctx, recordQuestionOutcomeSQL, o.Tenant, o.RunID, o.Step, o.Round, o.State, storable(o.By), o.At, answers,
		storable(o.Note))
	if err != nil {
		return false, fmt.Errorf("record the outcome of round %d of the questions of step %d of run %s: %w", o.Round, o.Step, o.RunID, err)
	}
	return tag.RowsAffected() == 1, nil
}

const loseLiveQuestionsSQL = `
UPDATE questions SET state = 'lost', answered_at = $4, note = $5
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND live AND state = 'pending'`

// LoseLiveQuestions records that the live questions still pending on a
// step can no longer be answered (the worker that held the server's
// session died, or the call ended): they are lost, and an answer sent
// after is refused. It returns how many there were.
func LoseLiveQuestions(ctx context.Context, db DB, tenant, runID string, step int64, at time.Time, why string) (int64, error) {
	tag, err := db.Exec(ctx, loseLiveQuestionsSQL, tenant, runID, step, at, storable(why))
	if err != nil {
		return 0, fmt.Errorf("record the live questions of step %d of run %s lost: %w", step, runID, err)
	}
	return tag.RowsAffected(), nil
}

const renewLiveQuestionSQL = `
UPDATE questions SET held_until = statement_timestamp() + make_interval(secs => $5::float8)
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND live AND state = 'pending'
  AND (held_until IS NULL OR held_until > statement_timestamp())`

// RenewLiveQuestion moves a pending live round's hold on by hold from now:
// its worker is alive and waits for the answer (a round recorded without a
// hold takes one). It reports false when the
// round is no longer pending, or its hold had already lapsed (it reads
// lost, and may have been answered as such): the worker must then stop
// waiting, as if it had died.
func RenewLiveQuestion(ctx context.Context, db DB, tenant, runID string, step int64, round int, hold time.Duration) (bool, error) {
	tag, err := db.Exec(ctx, renewLiveQuestionSQL, tenant, runID, step, round, hold.Seconds())
	if err != nil {
		return false, fmt.Errorf("renew the hold on round %d of the questions of step %d of run %s: %w", round, step, runID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// loseLapsedSQL writes down that a lapsed round is lost.
const loseLapsedSQL = `
UPDATE questions q SET state = 'lost', answered_at = statement_timestamp(), note = $5
WHERE q.tenant = $1 AND q.run_id = $2 AND q.step = $3 AND q.round = $4 AND ` + lapsedSQL

const withdrawQuestionsSQL = `
UPDATE questions SET state = 'cancelled', answered_by = nullif($4, ''), answered_at = $5, note = $6
WHERE tenant = $1 AND run_id = $2 AND step = ANY($3) AND state = 'pending' AND NOT live`

// WithdrawQuestions records the questions a cancelled run's steps waited
// on withdrawn (by, at, why): an answer sent after is refused. The run
// records it too, once it gets there.
func WithdrawQuestions(ctx context.Context, db DB, tenant, runID string, steps []int64, by string, at time.Time, why string) error {
	if len(steps) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, withdrawQuestionsSQL, tenant, runID, steps, storable(by), at, storable(why)); err != nil {
		return fmt.Errorf("withdraw the questions of cancelled run %s: %w", runID, err)
	}
	return nil
}

// LookupQuestion reads a round of a step's questions, or its latest round
// (round 0); ErrNotFound when there is none.
func LookupQuestion(ctx context.Context, db DB, tenant, runID string, step int64, round int) (Question, error) {
	rows, err := db.Query(ctx, `SELECT `+questionColumns+` FROM questions q
WHERE q.tenant = $1 AND q.run_id = $2 AND q.step = $3 AND ($4::integer = 0 OR q.round = $4::integer)
ORDER BY q.round DESC LIMIT 1`, tenant, runID, step, round)
	if err != nil {
		return Question{}, fmt.Errorf("read the questions of step %d of run %s: %w", step, runID, err)
	}
	q, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[Question])
	if errors.Is(err, pgx.ErrNoRows) {
		return Question{}, noQuestion(runID, step)
	}
	if err != nil {
		return Question{}, fmt.Errorf("read the questions of step %d of run %s: %w", step, runID, err)
	}
	return q, nil
}

func noQuestion(runID string, step int64) error {
	return refused(ErrNotFound, fmt.Sprintf("run %q has no step %d that was asked a question", runID, step))
}

// AnswerOfRecord returns a round's accepted answer, or nil.
func AnswerOfRecord(ctx context.Context, db DB, tenant, runID string, step int64, round int) (*AnswerRecord, error) {
	rows, err := db.Query(ctx, `SELECT `+answerColumns+` FROM question_answers
WHERE tenant = $1 AND run_id = $2 AND step = $3 AND round = $4 AND outcome = 'accepted'`, tenant, runID, step, round)
	if err != nil {
		return nil, fmt.Errorf("read the answer to round %d of step %d of run %s: %w", round, step, runID, err)
	}
	rec, err := pgx.CollectOneRow(rows, pgx.RowToAddrOfStructByName[AnswerRecord])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the answer to round %d of step %d of run %s: %w", round, step, runID, err)
	}
	return rec, nil
}

// AnswerRequest is one answer to a round of questions, as it came.
type AnswerRequest struct {
	StepRequest
	// Answers answer the round's questions, by id.
	Answers questions.Answers
	// Only, when set instead of Answers, answers the round's only
	// question, whatever its id; a round of several is refused.
	Only *questions.Answer
	Note string
	// Now is what the round's deadline is compared with. Default: the
	// time of the call.
	Now time.Time
}

// Answered is what became of an answer that was not refused.
type Answered struct {
	// Record is the answer of record: this request's when it was
	// accepted, the first one's when Repeated.
	Record AnswerRecord
	// Repeated is true when the request repeated the answer of record.
	Repeated bool
	// Live says the round was asked over a live session: its worker takes
	// the answer from the table, and the run is not signalled.
	Live bool
	// Deliver is true when the run has yet to hear of the answer: it was
	// accepted now, or repeated while the round is still pending, and the
	// round is not live. The caller signals the run then.
	Deliver bool
}

// Answer checks and records an answer to a round of a step's questions,
// as [Resolve] does for outcomes, in this order: a run id no key can hold
// or a step that was asked nothing is [ErrNotFound] and leaves no row; a
// requester whose role may not answer, or who is not among those the round
// names, is [ErrForbidden]; r.Invalid, or answers that do not answer the
// round's questions as their schemas ask, is [ErrInvalid]; a round the
// step does not have, one that is no longer pending or whose deadline has
// passed, is [ErrNotPending]; then, under the round's row lock, other
// answers than the answer of record are [ErrConflict], the same again is
// Repeated, and a first answer on a pending round is accepted. Every
// request on a step that was asked leaves exactly one row in
// question_answers.
func Answer(ctx context.Context, db DB, r AnswerRequest) (Answered, error) {
	if _, err := keys.New(r.Tenant, r.RunID, r.Step, "tool"); err != nil {
		return Answered{}, noQuestion(untrusted.Cut(r.RunID, keys.MaxRunIDLen), r.Step)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	res, err := answer(ctx, db, r)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		// Another answer of record won a race the row lock should have
		// prevented: answer as if this request came second.
		res, err = answer(ctx, db, r)
	}
	return res, err
}

const lockQuestionSQL = `SELECT ` + questionColumns + ` FROM questions q
WHERE q.tenant = $1 AND q.run_id = $2 AND q.step = $3 AND ($4::integer = 0 OR q.round = $4::integer)
ORDER BY q.round DESC LIMIT 1`

const insertAnswerSQL = `
INSERT INTO question_answers (tenant, run_id, step, round, answers, outcome, answerer, role, note, remote_addr, user_agent, via, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

func answer(ctx context.Context, db DB, r AnswerRequest) (Answered, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Answered{}, fmt.Errorf("answer: %w", err)
	}
	defer rollback(ctx, tx)
	lock := lockQuestionSQL
	if r.May {
		lock += ` FOR UPDATE`
	}
	want := max(r.Round, 0)
	if r.Round > MaxRound {
		want = 0
	}
	rows, err := tx.Query(ctx, lock, r.Tenant, r.RunID, r.Step, want)
	if err != nil {
		return Answered{}, fmt.Errorf("answer: read step %d of run %s: %w", r.Step, r.RunID, err)
	}
	q, err := pgx.CollectOneRow(rows, pgx.RowToStructByName[Question])
	found := true
	switch {
	case errors.Is(err, pgx.ErrNoRows) && want == 0:
		return Answered{}, noQuestion(r.RunID, r.Step)
	case errors.Is(err, pgx.ErrNoRows):
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM questions WHERE tenant = $1 AND run_id = $2 AND step = $3)`,
			r.Tenant, r.RunID, r.Step).Scan(&exists); err != nil {
			return Answered{}, fmt.Errorf("answer: read step %d of run %s: %w", r.Step, r.RunID, err)
		}
		if !exists {
			return Answered{}, noQuestion(r.RunID, r.Step)
		}
		found, q.Round = false, want
	case err != nil:
		return Answered{}, fmt.Errorf("answer: read step %d of run %s: %w", r.Step, r.RunID, err)
	}
	a := answerAudit{tx: tx, r: r, round: q.Round}
	if !r.May {
		return Answered{}, a.refuse(ctx, OutcomeForbidden, "the role "+r.Role+" may not answer",
			refused(ErrForbidden, fmt.Sprintf("%s is a %s, which may not answer", r.By, r.Role)))
	}
	if found && r.Role != RoleLocal && !q.MayAnswer(r.By) {
		return Answered{}, a.refuse(ctx, OutcomeForbidden, "not among those who may answer",
			refused(ErrForbidden, fmt.Sprintf("%s may not answer the questions of step %d of run %s: they are for %s",
				r.By, r.Step, r.RunID, strings.Join(q.AnswerBy, ", "))))
	}
	if bad := r.invalid(); bad != nil {
		return Answered{}, a.refuse(ctx, OutcomeInvalid, bad.Error(), &RefusedError{Err: ErrInvalid, Message: bad.Error(), Cause: bad})
	}
	if !found {
		return Answered{}, a.refuse(ctx, OutcomeNotPending, fmt.Sprintf("the step has no round %d", want), refused(ErrNotPending,
			fmt.Sprintf("step %d of run %s has no round %d of questions", r.Step, r.RunID, want)))
	}
	if r.Only != nil {
		if len(r.Answers) > 0 || len(q.Items) != 1 {
			bad := fmt.Errorf("round %d asks %d questions (%s): answer each by its id (answers), not with one action", q.Round, len(q.Items), itemIDs(q.Items))
			if len(r.Answers) > 0 {
				bad = errors.New("give either action (and content) or answers, not both")
			}
			a.r.Answers = nil
			return Answered{}, a.refuse(ctx, OutcomeInvalid, bad.Error(), &RefusedError{Err: ErrInvalid, Message: bad.Error(), Cause: bad})
		}
		r.Answers = questions.Answers{q.Items[0].ID: *r.Only}
		a.r.Answers = r.Answers
	}
	if err := q.Asked().Check(r.Answers); err != nil {
		return Answered{}, a.refuse(ctx, OutcomeInvalid, err.Error(), &RefusedError{Err: ErrInvalid, Message: err.Error(), Cause: err})
	}
	orig, err := AnswerOfRecord(ctx, tx, r.Tenant, r.RunID, r.Step, q.Round)
	if err != nil {
		return Answered{}, err
	}
	if orig != nil {
		same, err := untrusted.Equal(orig.Answers, mustJSON(r.Answers))
		if err != nil || !same {
			return Answered{}, a.refuse(ctx, OutcomeConflict, "the round was already answered otherwise", refused(ErrConflict,
				fmt.Sprintf("round %d of the questions of step %d of run %s was already answered by %s at %s; an answer cannot be changed",
					q.Round, r.Step, r.RunID, orig.Answerer, stamp(orig.AnsweredAt))))
		}
		if err := a.commit(ctx, OutcomeRepeated, ""); err != nil {
			return Answered{}, err
		}
		pending := q.State == QuestionPending
		return Answered{Record: *orig, Repeated: true, Live: q.Live, Deliver: pending && !q.Live}, nil
	}
	if q.State != QuestionPending || !r.Now.Before(q.Deadline) {
		why := "the round is " + q.State
		switch {
		case q.State == QuestionPending:
			why = "the round's deadline " + stamp(q.Deadline) + " has passed"
		case q.Live && q.State == QuestionLost:
			why += ": " + q.Note
			// A round read lost because its hold lapsed says so in the
			// table too.
			if _, err := tx.Exec(ctx, loseLapsedSQL, r.Tenant, r.RunID, r.Step, q.Round, lapsedNote); err != nil {
				return Answered{}, fmt.Errorf("answer: record round %d of step %d of run %s lost: %w", q.Round, r.Step, r.RunID, err)
			}
		}
		return Answered{}, a.refuse(ctx, OutcomeNotPending, why, refused(ErrNotPending,
			fmt.Sprintf("round %d of the questions of step %d of run %s is not pending: %s", q.Round, r.Step, r.RunID, why)))
	}
	rows, err = tx.Query(ctx, insertAnswerSQL+" RETURNING "+answerColumns, a.args(OutcomeAccepted, "")...)
	if err != nil {
		return Answered{}, fmt.Errorf("answer: record the answer on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[AnswerRecord])
	if err != nil {
		return Answered{}, fmt.Errorf("answer: record the answer on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Answered{}, fmt.Errorf("answer: record the answer on step %d of run %s: %w", r.Step, r.RunID, err)
	}
	return Answered{Record: rec, Live: q.Live, Deliver: !q.Live}, nil
}

// invalid is what keeps the answer from being taken on its values, before
// the round's questions are looked at.
func (r AnswerRequest) invalid() error {
	if r.Invalid != nil {
		return r.Invalid
	}
	if r.Round > MaxRound {
		return fmt.Errorf("round %d is out of range: rounds are numbered from 1 to %d (0 or none: the latest)", r.Round, MaxRound)
	}
	return untrusted.Text("note", r.Note, MaxCommentBytes)
}

func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return raw
}

// answerAudit records an answer that is refused or repeated.
type answerAudit struct {
	tx    pgx.Tx
	r     AnswerRequest
	round int
}

// args are the values of the request's row: the answers when they can be
// kept, what the client sent escaped and cut as for decisions.
func (a answerAudit) args(outcome, detail string) []any {
	r := a.r
	var answers any
	if raw := mustJSON(r.Answers); len(r.Answers) > 0 && untrusted.Value("answers", raw, MaxResultBytes) == nil {
		answers = []byte(raw)
	}
	return []any{r.Tenant, r.RunID, r.Step, a.round, answers, outcome, untrusted.Clean(r.By, MaxNameBytes),
		untrusted.Clean(r.Role, MaxNameBytes), auditText("note", r.Note, MaxCommentBytes), untrusted.Clean(r.RemoteAddr, maxAuditRemoteAddr),
		untrusted.Clean(r.UserAgent, maxAuditUserAgent), r.Via, untrusted.Clean(detail, maxAuditDetail)}
}

func (a answerAudit) commit(ctx context.Context, outcome, detail string) error {
	if _, err := a.tx.Exec(ctx, insertAnswerSQL, a.args(outcome, detail)...); err != nil {
		return fmt.Errorf("answer: audit the %s request on step %d of run %s: %w", outcome, a.r.Step, a.r.RunID, err)
	}
	if err := a.tx.Commit(ctx); err != nil {
		return fmt.Errorf("answer: audit the %s request on step %d of run %s: %w", outcome, a.r.Step, a.r.RunID, err)
	}
	return nil
}

func (a answerAudit) refuse(ctx context.Context, outcome, detail string, why *RefusedError) error {
	if err := a.commit(ctx, outcome, detail); err != nil {
		return err
	}
	return why
}

// listQuestionsSQL lists a tenant's rounds of questions that wait for an
// answer: pending, no answer of record, deadline ahead ($2: now); the
// nearest deadline first.
const listQuestionsSQL = `SELECT ` + questionColumns + ` FROM questions q
WHERE q.tenant = $1 AND q.state = 'pending' AND q.deadline > $2 AND NOT coalesce(` + lapsedSQL + `, false)
  AND NOT EXISTS (SELECT 1 FROM question_answers n
                  WHERE n.tenant = q.tenant AND n.run_id = q.run_id AND n.step = q.step AND n.round = q.round
                    AND n.outcome = 'accepted')
ORDER BY q.deadline, q.run_id, q.step LIMIT $3`

// ListQuestions lists the tenant's rounds of questions that wait for an
// answer: pending, unanswered, deadline ahead; the nearest deadline first.
func ListQuestions(ctx context.Context, db DB, p Page) ([]Question, error) {
	rows, err := db.Query(ctx, listQuestionsSQL, p.Tenant, p.Now, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list questions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Question])
	if err != nil {
		return nil, fmt.Errorf("list questions: %w", err)
	}
	return out, nil
}

// RunQuestions lists every round of questions of a run's steps, oldest
// first, for its status.
func RunQuestions(ctx context.Context, db DB, tenant, runID string) ([]Question, error) {
	rows, err := db.Query(ctx, `SELECT `+questionColumns+` FROM questions q WHERE q.tenant = $1 AND q.run_id = $2
ORDER BY q.step, q.round`, tenant, runID)
	if err != nil {
		return nil, fmt.Errorf("read the questions of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Question])
	if err != nil {
		return nil, fmt.Errorf("read the questions of run %s: %w", runID, err)
	}
	return out, nil
}

// itemIDs lists the ids of a round's questions.
func itemIDs(items []questions.Item) string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = fmt.Sprintf("%q", it.ID)
	}
	return strings.Join(ids, ", ")
}

// pendingQuestionsSQL lists the rounds that wait for an answer of every
// tenant ($1 = ”) or one, the nearest deadline first.
const pendingQuestionsSQL = `SELECT ` + questionColumns + ` FROM questions q
WHERE q.state = 'pending' AND q.deadline > $2 AND ($1 = '' OR q.tenant = $1) AND NOT coalesce(` + lapsedSQL + `, false)
  AND NOT EXISTS (SELECT 1 FROM question_answers n
                  WHERE n.tenant = q.tenant AND n.run_id = q.run_id AND n.step = q.step AND n.round = q.round
                    AND n.outcome = 'accepted')
ORDER BY q.deadline, q.tenant, q.run_id, q.step`

// PendingQuestions lists the rounds of questions that wait for an answer
// at now, the nearest deadline first; tenant "" lists every tenant's.
func PendingQuestions(ctx context.Context, db DB, tenant string, now time.Time) ([]Question, error) {
	rows, err := db.Query(ctx, pendingQuestionsSQL, tenant, now)
	if err != nil {
		return nil, fmt.Errorf("list questions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Question])
	if err != nil {
		return nil, fmt.Errorf("list questions: %w", err)
	}
	return out, nil
}
