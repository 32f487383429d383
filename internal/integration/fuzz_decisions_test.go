package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/approvals"
	"github.com/oncerun/oncerun/internal/approvalstore"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/tools"
	"github.com/oncerun/oncerun/worker"
)

// fuzzFormAnswerWithin bounds an inbox form's answer: a decision's
// deadlines, then, for a refusal, the inbox shown again with its runs'
// earlier steps (3 s each).
const fuzzFormAnswerWithin = fuzzAnswerWithin + 5*time.Second

// hashMark in a fuzzed body or form stands for the args hash of the step
// the request goes to, so that inputs reach past the hash check.
const hashMark = "HASH"

// FuzzEditAndResolveAPI sends arbitrary edit and resolve requests to the
// approvals API, with the invariants of FuzzApprovalsAPI: every request is
// answered within its deadlines and never 500; a request on a step of the
// caller's tenant leaves exactly one audit row (approval_decisions for an
// edit, resolution_decisions for an answer), and one on a step that does
// not exist, or is another tenant's, is 404 and leaves none.
//
// Each input is an edit and an answer (their bodies and User-Agent), sent
// by one of the test identities (who) to one of (target): the step the
// world's real run waits on (and the world's step that needs resolution),
// a pending step and a step needing resolution made for the input, the
// same made for the other tenant only, or the run id runID.
func FuzzEditAndResolveAPI(f *testing.F) {
	w := newDecisionFuzzWorld(f)
	edit := func(args string) []byte { return []byte(`{"args_hash":"` + hashMark + `","args":` + args + `}`) }
	credit := func(amount string) string {
		return `{"order_id":"1001","reason":"damaged_in_transit","amount_cents":` + amount + `,"currency":"EUR"}`
	}
	f.Add(edit(credit("100")), []byte(`{"outcome":"applied","result":{"id":9007199254740993}}`), "curl/8", "", uint8(1), uint8(1))
	f.Add(edit(credit("-999999")), []byte(`{"outcome":"applied","result":1e400}`), "", "", uint8(1), uint8(0))
	f.Add(edit(credit("100")), []byte(`{"outcome":"not_applied","round":2147483648}`), "", "", uint8(1), uint8(1))
	f.Add(edit(`{"order_id":"1\u0000","reason":"damaged_in_transit","amount_cents":1,"currency":"EUR"}`),
		[]byte(`{"outcome":"applied","note":"a\u0000b"}`), "", "", uint8(1), uint8(1))
	f.Add(edit(`{"order_id":"1`+"\xff"+`","reason":"damaged_in_transit","amount_cents":1,"currency":"EUR"}`),
		[]byte(`{"outcome":"applied","note":"`+"\xff"+`"}`), "Mozilla/\xff", "", uint8(1), uint8(1))
	f.Add(edit(credit("9007199254740993")), []byte(`{"outcome":"applied","note":"a`+"\x00"+`b"}`), "", "", uint8(0), uint8(1))
	f.Add(edit(credit("100")), []byte(`{"outcome":"applied"}`), "", "", uint8(3), uint8(2))
	f.Add([]byte(`{"args_hash":"x","args":[1]}`), []byte(`nope`), "", "r\u202e1", uint8(2), uint8(3))
	f.Add(edit(credit("100")), []byte(`{"outcome":"applied","round":1,"outcome":"not_applied"}`), "", "..", uint8(1), uint8(7))
	// Currencies no limit can count, in an edit (refused: 422 naming the
	// field) and beside a resolution.
	for _, code := range []string{`"978"`, `"€"`, `"EURO"`, `"XXX"`, `"XTS"`, `""`, `"eur"`, `978`, `null`} {
		f.Add(edit(`{"order_id":"1001","reason":"damaged_in_transit","amount_cents":100,"currency":`+code+`}`),
			[]byte(`{"outcome":"applied","result":{"currency":`+code+`}}`), "", "", uint8(1), uint8(1))
	}
	f.Fuzz(func(t *testing.T, editBody, resolveBody []byte, agent, runID string, who, target uint8) {
		id := testIdentities[int(who)%len(testIdentities)]
		in := w.input(t, id, target, runID)
		w.expectAudit(t, id, in.approval, "approvals", "approval_decisions", func() (int, []byte) {
			return w.send(t, http.MethodPost, in.approval.path("edit"), id, in.withHash(editBody), "User-Agent", agent)
		})
		w.expectAudit(t, id, in.resolution, "resolutions", "resolution_decisions", func() (int, []byte) {
			return w.send(t, http.MethodPost, in.resolution.path("resolve"), id, in.withHash(resolveBody), "User-Agent", agent)
		})
	})
}

// FuzzInboxForms posts arbitrary forms to the inbox's decide, edit and
// resolve endpoints (kind), from a signed-in browser of one of the test
// identities whose CSRF token leads the form, with the invariants of
// FuzzEditAndResolveAPI. A form that does not parse is 400 and leaves no
// row, as a form no browser of the inbox sends.
func FuzzInboxForms(f *testing.F) {
	w := newDecisionFuzzWorld(f)
	f.Add(uint8(0), "decision=approve&args_hash="+hashMark+"&comment=ok", "", "", uint8(1), uint8(1))
	f.Add(uint8(0), "decision=approve&args_hash="+hashMark+"&comment=a%00b", "", "", uint8(1), uint8(0))
	f.Add(uint8(1), "args_hash="+hashMark+"&arg.amount_cents=-9999.99&arg.currency=EUR", "", "", uint8(1), uint8(1))
	f.Add(uint8(1), "args_hash="+hashMark+"&arg.reason=%FF&arg.order_id=1%00", "", "", uint8(1), uint8(1))
	f.Add(uint8(1), "args_hash="+hashMark+"&args="+url.QueryEscape(`{"order_id":"1001","reason":"damaged_in_transit","amount_cents":9007199254740993,"currency":"EUR"}`),
		"", "", uint8(1), uint8(1))
	f.Add(uint8(2), "outcome=not_applied&round=2147483648", "", "", uint8(1), uint8(1))
	f.Add(uint8(2), "outcome=applied&result="+url.QueryEscape(`{"id":9007199254740993}`), "", "", uint8(1), uint8(1))
	f.Add(uint8(2), "outcome=applied&result=1e400", "", "", uint8(1), uint8(0))
	f.Add(uint8(2), "outcome=applied&note=a%00b", "", "", uint8(1), uint8(1))
	f.Add(uint8(2), "outcome=applied&note=%FF&result=%FF", "Mozilla/\xff", "", uint8(1), uint8(1))
	f.Add(uint8(0), "decision=approve&args_hash="+hashMark+"&comment=%zz", "", "", uint8(1), uint8(1))
	f.Add(uint8(1), "args_hash="+hashMark+"&arg.amount_cents=1", "", "r\u202e1", uint8(2), uint8(3))
	f.Fuzz(func(t *testing.T, kind uint8, form, agent, runID string, who, target uint8) {
		id := testIdentities[int(who)%len(testIdentities)]
		in := w.input(t, id, target, runID)
		ref, verb, rows, audit := in.approval, "decide", "approvals", "approval_decisions"
		switch kind % 3 {
		case 1:
			verb = "edit"
		case 2:
			ref, verb, rows, audit = in.resolution, "resolve", "resolutions", "resolution_decisions"
		}
		body := string(in.withHash([]byte(form)))
		post := func() (int, []byte) { return w.postForm(t, id, ref.path(verb), body, agent) }
		if _, err := url.ParseQuery(body); err != nil {
			w.expectNoAudit(t, id, ref, audit, http.StatusBadRequest, post)
			return
		}
		w.expectAudit(t, id, ref, rows, audit, post)
	})
}

// decisionFuzzWorld is FuzzApprovalsAPI's world with what edits, answers
// and forms need: a step that needs resolution, a signed-in browser per
// identity, and steps made afresh for each input.
type decisionFuzzWorld struct {
	*fuzzWorld
	// resolving is the world's step that needs resolution, of tenant acme
	// (no run: an answer is recorded, then the run is not found).
	resolving stepRef
	// credit is the call the steps made for an input propose.
	credit tools.Prepared
	// browsers are the signed-in clients of the inbox, by identity.
	browsers map[string]*formClient
	inputs   atomic.Int64
}

// stepRef is a step a request goes to, with its args hash if it has one.
type stepRef struct {
	runID string
	step  int64
	hash  string
}

func (s stepRef) path(verb string) string {
	return "/v1/runs/" + url.PathEscape(s.runID) + "/steps/" + strconv.FormatInt(s.step, 10) + "/" + verb
}

// formClient is a browser signed in to the inbox; it does not follow
// redirects.
type formClient struct {
	http *http.Client
	csrf string
}

func newDecisionFuzzWorld(f *testing.F) *decisionFuzzWorld {
	w := &decisionFuzzWorld{fuzzWorld: newFuzzWorld(f), browsers: map[string]*formClient{}}
	w.resolving = stepRef{runID: w.e.id("fuzz-unknown"), step: 2}
	w.e.seedResolution("acme", w.resolving.runID, w.resolving.step, 1)
	reg, err := worker.Registry(worker.Config{})
	require.NoError(f, err)
	plan := creditPlan()[1]
	args, err := json.Marshal(plan["args"])
	require.NoError(f, err)
	w.credit, err = reg.Prepare(tools.ProposedCall{Tool: plan["tool"].(string), Args: args})
	require.NoError(f, err)
	for _, id := range testIdentities {
		w.browsers[id.Name] = w.signIn(f, id)
	}
	return w
}

// signIn signs a browser in as id and reads its CSRF token off the inbox.
func (w *decisionFuzzWorld) signIn(f *testing.F, id approvals.Identity) *formClient {
	jar, err := cookiejar.New(nil)
	require.NoError(f, err)
	c := &formClient{http: &http.Client{Jar: jar, Timeout: fuzzFormAnswerWithin,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	resp, err := c.http.PostForm(w.a.srv.URL+"/login", url.Values{"token": {w.a.tokens[id.Name]}})
	require.NoError(f, err)
	resp.Body.Close()
	require.Equal(f, http.StatusSeeOther, resp.StatusCode)
	resp, err = c.http.Get(w.a.srv.URL + "/")
	require.NoError(f, err)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(f, err)
	m := csrfField.FindStringSubmatch(string(page))
	require.NotNil(f, m, "the inbox of %s carries a CSRF token", id.Name)
	c.csrf = m[1]
	return c
}

// fuzzInput is where one input's requests go.
type fuzzInput struct {
	approval, resolution stepRef
}

// withHash puts the approval step's args hash in place of hashMark.
func (in fuzzInput) withHash(b []byte) []byte {
	return []byte(strings.ReplaceAll(string(b), hashMark, in.approval.hash))
}

// input makes the steps of one input: a pending step (2) and a step that
// needs resolution (3) of a run of id's tenant, and the same of a run of
// the other tenant only; they are deleted when t ends, so that the world
// stays small. target picks where the requests go (see
// FuzzEditAndResolveAPI).
func (w *decisionFuzzWorld) input(t *testing.T, id approvals.Identity, target uint8, runID string) fuzzInput {
	t.Helper()
	n := w.inputs.Add(1)
	own, other := w.e.id(fmt.Sprintf("fz-%d", n)), w.e.id(fmt.Sprintf("fz-%d-other", n))
	otherTenant := "globex"
	if id.Tenant == "globex" {
		otherTenant = "acme"
	}
	w.seedSteps(t, id.Tenant, own)
	w.seedSteps(t, otherTenant, other)
	switch target % 4 {
	case 0:
		return fuzzInput{approval: stepRef{runID: w.pendingRun, step: 2, hash: w.pending.ArgsHash}, resolution: w.resolving}
	case 1:
		return fuzzInput{approval: stepRef{runID: own, step: 2, hash: w.credit.ArgsHash}, resolution: stepRef{runID: own, step: 3}}
	case 2:
		return fuzzInput{approval: stepRef{runID: other, step: 2, hash: w.credit.ArgsHash}, resolution: stepRef{runID: other, step: 3}}
	}
	step := int64(target/4%4) + 1
	if runID == "" || runID == "." || runID == ".." {
		// A URL path cannot carry them (the router sends the client to the
		// cleaned path); the service refuses such run ids at start.
		runID = "fz-none"
	}
	return fuzzInput{approval: stepRef{runID: runID, step: step}, resolution: stepRef{runID: runID, step: step}}
}

// seedSteps writes, as a run does, step 2 of run runID of tenant waiting
// for approval of the world's credit, and step 3 waiting for resolution.
// No run is started: a decision or an answer is recorded, and then the
// run is not found.
func (w *decisionFuzzWorld) seedSteps(t *testing.T, tenant, runID string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	require.NoError(t, approvalstore.RecordPending(ctx, w.e.pool, approvalstore.Request{
		Tenant: tenant, RunID: runID, Step: 2, Tool: w.credit.Tool.Name, Args: w.credit.Args,
		ArgsHash: w.credit.ArgsHash, Goal: "refund order 1001", Reason: "amount_cents above 10000", RequestedBy: "ops",
		RequestedAt: now, Deadline: now.Add(time.Hour),
	}))
	key, err := keys.New(tenant, runID, 3, "refund_payment")
	require.NoError(t, err)
	hash, err := keys.ArgsHash([]byte(refundArgs))
	require.NoError(t, err)
	require.NoError(t, approvalstore.RecordUnresolved(ctx, w.e.pool, approvalstore.Resolution{
		Tenant: tenant, RunID: runID, Step: 3, Round: 1, Tool: "refund_payment", Key: key.String(), Args: []byte(refundArgs),
		ArgsHash: hash, Goal: "refund order 1001", FirstSentAt: now, Known: unknownKnown, RequestedAt: now, Deadline: now.Add(time.Hour),
	}))
	t.Cleanup(func() {
		for _, table := range []string{"approvals", "approval_decisions", "resolutions", "resolution_decisions"} {
			_, err := w.e.pool.Exec(ctx, "DELETE FROM "+table+" WHERE tenant = $1 AND run_id = $2", tenant, runID)
			require.NoError(t, err)
		}
	})
}

// rowsOf counts the rows of table on step ref of tenant; a run id no key
// can hold names no step, and is not asked about (PostgreSQL would refuse
// it).
func (w *decisionFuzzWorld) rowsOf(t *testing.T, table, tenant string, ref stepRef) int {
	t.Helper()
	if _, err := keys.New(tenant, ref.runID, ref.step, "tool"); err != nil {
		return 0
	}
	return w.count(t, table, "tenant = $1 AND run_id = $2 AND step = $3", tenant, ref.runID, ref.step)
}

// expectAudit sends a request with send and checks its audit rows in
// audit: one more on a step of id's tenant that rows lists, and none, with
// a 404, on any other.
func (w *decisionFuzzWorld) expectAudit(t *testing.T, id approvals.Identity, ref stepRef, rows, audit string, send func() (int, []byte)) {
	t.Helper()
	if w.rowsOf(t, rows, id.Tenant, ref) == 0 {
		w.expectNoAudit(t, id, ref, audit, http.StatusNotFound, send)
		return
	}
	before := w.rowsOf(t, audit, id.Tenant, ref)
	status, raw := send()
	after := w.rowsOf(t, audit, id.Tenant, ref)
	require.Equal(t, before+1, after, "a request on step %d of run %q of %s (answered %d: %.300s) leaves one row in %s",
		ref.step, ref.runID, id.Tenant, status, raw, audit)
}

// expectNoAudit sends a request with send and checks that it is answered
// status and leaves no row in audit.
func (w *decisionFuzzWorld) expectNoAudit(t *testing.T, id approvals.Identity, ref stepRef, audit string, status int, send func() (int, []byte)) {
	t.Helper()
	before := w.rowsOf(t, audit, id.Tenant, ref)
	got, raw := send()
	require.Equal(t, status, got, "step %d of run %q of %s: %.300s", ref.step, ref.runID, id.Tenant, raw)
	require.Equal(t, before, w.rowsOf(t, audit, id.Tenant, ref), "no row in %s", audit)
}

// postForm posts form, led by the CSRF token of id's browser, to the
// inbox path of an API path (without /v1), and returns the status and page.
func (w *decisionFuzzWorld) postForm(t *testing.T, id approvals.Identity, apiPath, form, agent string) (int, []byte) {
	t.Helper()
	c := w.browsers[id.Name]
	req, err := http.NewRequest(http.MethodPost, w.a.srv.URL+strings.TrimPrefix(apiPath, "/v1"),
		strings.NewReader("csrf="+url.QueryEscape(c.csrf)+"&"+form))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if headerValue(agent) {
		req.Header.Set("User-Agent", agent)
	}
	resp, err := c.http.Do(req)
	require.NoError(t, err, "the form is answered within %s", fuzzFormAnswerWithin)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotEqual(t, http.StatusInternalServerError, resp.StatusCode, "%s: %s", apiPath, pageMessages(page))
	return resp.StatusCode, page
}

// pageMessages is what a page of the inbox says in its messages, for a
// failure's report.
func pageMessages(page []byte) string {
	var out []string
	for _, m := range pageMessage.FindAllSubmatch(page, -1) {
		out = append(out, string(m[1]))
	}
	return strings.Join(out, " | ")
}

var pageMessage = regexp.MustCompile(`(?s)role="(?:alert|status)">(.*?)</`)
