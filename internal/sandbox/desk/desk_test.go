package desk_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/internal/sandbox/desk"
)

// session connects an MCP client to a desk served over Streamable HTTP,
// sending header on every request.
func session(t *testing.T, cfg desk.Config, header http.Header) (*desk.Running, *mcpsdk.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := desk.Serve(ctx, "127.0.0.1:0", cfg)
	require.NoError(t, err)
	hc := &http.Client{Transport: headerTransport{header}}
	c := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "v1"}, nil)
	s, err := c.Connect(ctx, &mcpsdk.StreamableClientTransport{Endpoint: r.URL(), HTTPClient: hc}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return r, s
}

type headerTransport struct{ h http.Header }

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.h {
		req.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(req)
}

// call calls tool with args under key (in _meta, when key is set) and
// decodes the structured result into out.
func call(t *testing.T, s *mcpsdk.ClientSession, tool, key string, args, out any) {
	t.Helper()
	p := &mcpsdk.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		p.Meta = mcpsdk.Meta{mcp.MetaIdempotencyKey: key}
	}
	res, err := s.CallTool(context.Background(), p)
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.Content)
	raw, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, out))
}

var ticket = desk.TicketArgs{OrderID: "1001", Subject: "Parcel arrived damaged"}

func TestDeskOpensOneTicketPerKey(t *testing.T) {
	t.Parallel()
	r, s := session(t, desk.Config{}, nil)
	var first, again, other desk.Ticket
	call(t, s, "open_ticket", "v1/acme/r1/5/desk_open_ticket", ticket, &first)
	call(t, s, "open_ticket", "v1/acme/r1/5/desk_open_ticket", ticket, &again)
	call(t, s, "open_ticket", "v1/acme/r1/6/desk_open_ticket", ticket, &other)
	assert.Equal(t, first, again, "the same key answers the first ticket")
	assert.NotEqual(t, first.ID, other.ID)
	assert.Len(t, r.Tickets(), 2)

	var found desk.Found
	call(t, s, "find_ticket", "v1/acme/r1/5/desk_open_ticket", ticket, &found)
	require.True(t, found.Found)
	assert.Equal(t, first, *found.Ticket)
	call(t, s, "find_ticket", "v1/acme/r1/7/desk_open_ticket", ticket, &found)
	assert.False(t, found.Found)
}

func TestDeskReadsTheKeyFromTheHeaderToo(t *testing.T) {
	t.Parallel()
	r, s := session(t, desk.Config{}, http.Header{"Idempotency-Key": {"k-1"}})
	var a, b desk.Ticket
	call(t, s, "open_ticket", "", ticket, &a)
	call(t, s, "open_ticket", "", ticket, &b)
	assert.Equal(t, "k-1", a.Key)
	assert.Equal(t, a, b)
	assert.Len(t, r.Tickets(), 1)
}

func TestDeskThatIgnoresKeysOpensATicketPerCall(t *testing.T) {
	t.Parallel()
	r, s := session(t, desk.Config{IgnoreKeys: true}, nil)
	var a, b desk.Ticket
	call(t, s, "open_ticket", "k", ticket, &a)
	call(t, s, "open_ticket", "k", ticket, &b)
	assert.NotEqual(t, a.ID, b.ID)
	assert.Len(t, r.Tickets(), 2)
}

func TestDeskLedgerSurvivesARestartAndIsSharedByItsDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, s := session(t, desk.Config{DataDir: dir}, nil)
	var first desk.Voucher
	call(t, s, "issue_voucher", "k-v", desk.VoucherArgs{OrderID: "1001", AmountCents: 500, Currency: "EUR"}, &first)

	// Another desk process on the same data dir, as a stdio desk
	// restarted with its worker.
	_, s2 := session(t, desk.Config{DataDir: dir}, nil)
	var again desk.Voucher
	call(t, s2, "issue_voucher", "k-v", desk.VoucherArgs{OrderID: "1001", AmountCents: 500, Currency: "EUR"}, &again)
	assert.Equal(t, first, again, "the restarted desk knows the key")
	tickets, vouchers, err := desk.ReadLedger(dir)
	require.NoError(t, err)
	assert.Empty(t, tickets)
	assert.Len(t, vouchers, 1)
}

// A desk redeployed with a changed schema: open_ticket takes a priority,
// and still opens one ticket per key, with or without it.
func TestADeskWithTicketPrioritySaysSoInItsSchema(t *testing.T) {
	t.Parallel()
	for _, priority := range []bool{false, true} {
		r, s := session(t, desk.Config{TicketPriority: priority}, nil)
		tools, err := s.ListTools(context.Background(), nil)
		require.NoError(t, err)
		var schema string
		for _, tool := range tools.Tools {
			if tool.Name == "open_ticket" {
				raw, err := json.Marshal(tool.InputSchema)
				require.NoError(t, err)
				schema = string(raw)
			}
		}
		assert.Equal(t, priority, strings.Contains(schema, `"priority"`), "priority in the schema: %s", schema)
		var a, b desk.Ticket
		call(t, s, "open_ticket", "k-1", ticket, &a)
		if !priority {
			continue
		}
		call(t, s, "open_ticket", "k-1", desk.PriorityTicketArgs{TicketArgs: ticket, Priority: "high"}, &b)
		assert.Equal(t, a, b)
		assert.Len(t, r.Tickets(), 1)
	}
}
