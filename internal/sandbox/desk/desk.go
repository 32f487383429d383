// Package desk is a sandbox support desk served over the Model Context
// Protocol: an MCP server whose tools open tickets and issue vouchers and
// keep them in a ledger that survives restarts. It is to MCP tools what
// the sandbox payment provider is to refunds: a faithful opponent for the
// dev stack, the demo and the tests, never a production system.
//
// Calls that change the ledger honour the idempotency key oncerun sends
// (in the request's _meta as "io.oncerun/idempotency-key", or as an
// Idempotency-Key HTTP header): the same key returns the first ticket. With
// IgnoreKeys the desk behaves like a server that knows nothing of keys and
// makes a new ticket on every call.
package desk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/internal/mcp"
)

// Ticket is a support ticket the desk opened.
type Ticket struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
	Subject string `json:"subject"`
	Body    string `json:"body,omitempty"`
	// Key is the idempotency key of the call that opened it, if any.
	Key     string `json:"idempotency_key,omitempty"`
	Created int64  `json:"created"`
	// Traceparent is the W3C trace context the call that opened it
	// carried in its _meta, if any.
	Traceparent string `json:"traceparent,omitempty"`
}

// Voucher is a voucher the desk issued.
type Voucher struct {
	ID          string `json:"id"`
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Key         string `json:"idempotency_key,omitempty"`
	Created     int64  `json:"created"`
	// Traceparent is as a Ticket's.
	Traceparent string `json:"traceparent,omitempty"`
}

// Replacement is a replacement item the desk shipped, in the size a
// person chose when the desk asked.
type Replacement struct {
	ID      string `json:"id"`
	OrderID string `json:"order_id"`
	Size    string `json:"size"`
	Key     string `json:"idempotency_key,omitempty"`
	Created int64  `json:"created"`
}

// Config configures a desk.
type Config struct {
	// DataDir holds the ledger (ledger.json). Empty: the ledger lives in
	// memory only.
	DataDir string
	// IgnoreKeys makes every call a new ticket or voucher, whatever key it
	// carries.
	IgnoreKeys bool
	// TicketPriority gives open_ticket and find_ticket an optional
	// priority argument: the desk as a redeploy that changed a tool's
	// schema left it. Workers that connect before and after differ in
	// what they know of the tool.
	TicketPriority bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Desk is the desk's ledger and its MCP tools.
type Desk struct {
	cfg Config
	mu  sync.Mutex
	led ledger
}

// ledger is what the desk keeps.
type ledger struct {
	Tickets      []Ticket      `json:"tickets"`
	Vouchers     []Voucher     `json:"vouchers"`
	Replacements []Replacement `json:"replacements,omitempty"`
}

// New opens the desk's ledger in cfg.DataDir (creating it if missing).
func New(cfg Config) (*Desk, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Desk{cfg: cfg}
	if cfg.DataDir == "" {
		return d, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("desk: data dir: %w", err)
	}
	raw, err := os.ReadFile(d.path())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("desk: read ledger: %w", err)
	}
	if err := json.Unmarshal(raw, &d.led); err != nil {
		return nil, fmt.Errorf("desk: ledger %s: %w", d.path(), err)
	}
	return d, nil
}

func (d *Desk) path() string { return filepath.Join(d.cfg.DataDir, "ledger.json") }

// reload reads the ledger again, so that two processes serving the same
// data dir one after the other (a stdio desk restarted with its worker)
// see each other's writes; d.mu must be held.
func (d *Desk) reload() error {
	if d.cfg.DataDir == "" {
		return nil
	}
	raw, err := os.ReadFile(d.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("desk: read ledger: %w", err)
	}
	var led ledger
	if err := json.Unmarshal(raw, &led); err != nil {
		return fmt.Errorf("desk: ledger %s: %w", d.path(), err)
	}
	d.led = led
	return nil
}

// save writes the ledger atomically; d.mu must be held.
func (d *Desk) save() error {
	if d.cfg.DataDir == "" {
		return nil
	}
	raw, err := json.MarshalIndent(d.led, "", "  ")
	if err != nil {
		return err
	}
	tmp := d.path() + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return fmt.Errorf("desk: write ledger: %w", err)
	}
	if err := os.Rename(tmp, d.path()); err != nil {
		return fmt.Errorf("desk: write ledger: %w", err)
	}
	return nil
}

// Tickets returns the tickets opened so far.
func (d *Desk) Tickets() []Ticket {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.reload()
	return append([]Ticket(nil), d.led.Tickets...)
}

// Vouchers returns the vouchers issued so far.
func (d *Desk) Vouchers() []Voucher {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.reload()
	return append([]Voucher(nil), d.led.Vouchers...)
}

// Replacements returns the replacements shipped so far.
func (d *Desk) Replacements() []Replacement {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.reload()
	return append([]Replacement(nil), d.led.Replacements...)
}

// ReadLedger reads the tickets and vouchers a desk keeps in dataDir, for
// a caller that does not run the desk (the desk may be another process).
func ReadLedger(dataDir string) ([]Ticket, []Voucher, error) {
	d, err := New(Config{DataDir: dataDir})
	if err != nil {
		return nil, nil, err
	}
	return d.Tickets(), d.Vouchers(), nil
}

// ReadReplacements reads the replacements a desk keeps in dataDir.
func ReadReplacements(dataDir string) ([]Replacement, error) {
	d, err := New(Config{DataDir: dataDir})
	if err != nil {
		return nil, err
	}
	return d.Replacements(), nil
}

// keyOf is the idempotency key a call carries: _meta first, then the HTTP
// header.
func keyOf(req *mcpsdk.CallToolRequest) string {
	if k, ok := req.Params.Meta[mcp.MetaIdempotencyKey].(string); ok && k != "" {
		return k
	}
	if req.Extra != nil && req.Extra.Header != nil {
		return req.Extra.Header.Get("Idempotency-Key")
	}
	return ""
}

// traceparentOf is the trace context a call carries in its _meta.
func traceparentOf(req *mcpsdk.CallToolRequest) string {
	tp, _ := req.Params.Meta["traceparent"].(string)
	return tp
}

// TicketArgs are open_ticket's and find_ticket's arguments.
type TicketArgs struct {
	OrderID string `json:"order_id" jsonschema:"the order the ticket is about"`
	Subject string `json:"subject" jsonschema:"one line"`
	Body    string `json:"body,omitempty" jsonschema:"what the customer should know"`
}

// PriorityTicketArgs are open_ticket's and find_ticket's arguments on a
// desk with Config.TicketPriority.
type PriorityTicketArgs struct {
	TicketArgs
	Priority string `json:"priority,omitempty" jsonschema:"low, normal or high; normal when left out"`
}

// VoucherArgs are issue_voucher's and find_voucher's arguments.
type VoucherArgs struct {
	OrderID     string `json:"order_id" jsonschema:"the order the voucher is for"`
	AmountCents int64  `json:"amount_cents" jsonschema:"the voucher's value in minor units (cents)"`
	Currency    string `json:"currency" jsonschema:"ISO 4217 code such as EUR"`
}

// ReplacementArgs are ship_replacement's and find_replacement's
// arguments.
type ReplacementArgs struct {
	OrderID string `json:"order_id" jsonschema:"the order whose item is replaced"`
}

// Found is what the paired reads answer: whether the call's key made a
// ticket (or voucher), and which.
type Found struct {
	Found       bool         `json:"found"`
	Ticket      *Ticket      `json:"ticket,omitempty"`
	Voucher     *Voucher     `json:"voucher,omitempty"`
	Replacement *Replacement `json:"replacement,omitempty"`
}

// Server returns an MCP server with the desk's tools:
//
//   - open_ticket {order_id, subject, body}: opens a ticket, once per key;
//   - find_ticket (the same arguments): the ticket the call's key opened;
//   - issue_voucher {order_id, amount_cents, currency}: issues a voucher,
//     once per key;
//   - find_voucher (the same arguments): the voucher the call's key issued;
//   - ship_replacement {order_id}: asks a person which size (an
//     input-required answer, or over a live session of an earlier
//     protocol, elicitation/create), then ships a replacement of the size
//     accepted, once per key; a declined or dismissed question ships
//     nothing and answers an error;
//   - find_replacement (the same arguments): the replacement the call's
//     key shipped.
func (d *Desk) Server() *mcpsdk.Server {
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "oncerun-sandbox-desk", Version: "v1"}, nil)
	// The desk says what its tools are, as MCP annotations: opening a
	// ticket or issuing a voucher adds and destroys nothing, and the finds
	// only read.
	additive := &mcpsdk.ToolAnnotations{DestructiveHint: new(false)}
	read := &mcpsdk.ToolAnnotations{ReadOnlyHint: true}
	open := func(_ context.Context, req *mcpsdk.CallToolRequest, in TicketArgs) (*mcpsdk.CallToolResult, Ticket, error) {
		if in.OrderID == "" || in.Subject == "" {
			return nil, Ticket{}, errors.New("order_id and subject are required")
		}
		t, err := d.openTicket(keyOf(req), traceparentOf(req), in)
		return nil, t, err
	}
	find := func(_ context.Context, req *mcpsdk.CallToolRequest, _ TicketArgs) (*mcpsdk.CallToolResult, Found, error) {
		return nil, d.findTicket(keyOf(req)), nil
	}
	openTool := &mcpsdk.Tool{Name: "open_ticket", Description: "Open a support ticket about an order.", Annotations: additive}
	findTool := &mcpsdk.Tool{Name: "find_ticket", Description: "Find the ticket this call's idempotency key opened.", Annotations: read}
	if d.cfg.TicketPriority {
		mcpsdk.AddTool(s, openTool, func(ctx context.Context, req *mcpsdk.CallToolRequest, in PriorityTicketArgs) (*mcpsdk.CallToolResult, Ticket, error) {
			return open(ctx, req, in.TicketArgs)
		})
		mcpsdk.AddTool(s, findTool, func(ctx context.Context, req *mcpsdk.CallToolRequest, in PriorityTicketArgs) (*mcpsdk.CallToolResult, Found, error) {
			return find(ctx, req, in.TicketArgs)
		})
	} else {
		mcpsdk.AddTool(s, openTool, open)
		mcpsdk.AddTool(s, findTool, find)
	}
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "issue_voucher", Description: "Issue a voucher for an order.", Annotations: additive},
		func(_ context.Context, req *mcpsdk.CallToolRequest, in VoucherArgs) (*mcpsdk.CallToolResult, Voucher, error) {
			if in.OrderID == "" || in.AmountCents <= 0 || len(in.Currency) != 3 {
				return nil, Voucher{}, errors.New("order_id, a positive amount_cents and a 3-letter currency are required")
			}
			v, err := d.issueVoucher(keyOf(req), traceparentOf(req), in)
			return nil, v, err
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "find_voucher", Description: "Find the voucher this call's idempotency key issued.", Annotations: read},
		func(_ context.Context, req *mcpsdk.CallToolRequest, _ VoucherArgs) (*mcpsdk.CallToolResult, Found, error) {
			return nil, d.findVoucher(keyOf(req)), nil
		})
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "ship_replacement", Description: "Ship a replacement for an order's item; asks which size.",
		Annotations: additive}, d.shipReplacement)
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "find_replacement", Description: "Find the replacement this call's idempotency key shipped.",
		Annotations: read},
		func(_ context.Context, req *mcpsdk.CallToolRequest, _ ReplacementArgs) (*mcpsdk.CallToolResult, Found, error) {
			return nil, d.findReplacement(keyOf(req)), nil
		})
	return s
}

// SizeQuestion is what ship_replacement asks.
const SizeQuestion = "Which size should the replacement be?"

// shipReplacement asks which size before it ships (the question and a
// request state naming the order, to be sent back with the answer), and
// ships the size a person accepted.
func (d *Desk) shipReplacement(_ context.Context, req *mcpsdk.CallToolRequest, in ReplacementArgs) (*mcpsdk.CallToolResult, any, error) {
	if in.OrderID == "" {
		return nil, nil, errors.New("order_id is required")
	}
	answer, ok := req.Params.InputResponses["size"].(*mcpsdk.ElicitResult)
	if !ok {
		return &mcpsdk.CallToolResult{RequestState: "replace:" + in.OrderID, InputRequests: mcpsdk.InputRequestMap{"size": &mcpsdk.ElicitParams{
			Message: SizeQuestion,
			RequestedSchema: map[string]any{"type": "object", "required": []string{"size"}, "properties": map[string]any{
				"size": map[string]any{"type": "string", "title": "Size", "enum": []string{"S", "M", "L", "XL"}}}},
		}}}, nil, nil
	}
	size, _ := answer.Content["size"].(string)
	if answer.Action != "accept" || size == "" {
		return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{
			Text: "nothing shipped: the size question was answered " + answer.Action}}}, nil, nil
	}
	r, err := d.ship(keyOf(req), in.OrderID, size)
	return nil, r, err
}

func (d *Desk) ship(key, order, size string) (Replacement, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reload(); err != nil {
		return Replacement{}, err
	}
	if !d.cfg.IgnoreKeys && key != "" {
		for _, r := range d.led.Replacements {
			if r.Key == key {
				return r, nil
			}
		}
	}
	r := Replacement{ID: fmt.Sprintf("rp_%d", len(d.led.Replacements)+1), OrderID: order, Size: size, Key: key, Created: d.cfg.Now().Unix()}
	d.led.Replacements = append(d.led.Replacements, r)
	if err := d.save(); err != nil {
		d.led.Replacements = d.led.Replacements[:len(d.led.Replacements)-1]
		return Replacement{}, err
	}
	return r, nil
}

func (d *Desk) findReplacement(key string) Found {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.reload()
	for _, r := range d.led.Replacements {
		if key != "" && r.Key == key {
			return Found{Found: true, Replacement: &r}
		}
	}
	return Found{}
}

func (d *Desk) openTicket(key, traceparent string, in TicketArgs) (Ticket, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reload(); err != nil {
		return Ticket{}, err
	}
	if !d.cfg.IgnoreKeys && key != "" {
		for _, t := range d.led.Tickets {
			if t.Key == key {
				return t, nil
			}
		}
	}
	t := Ticket{ID: fmt.Sprintf("tk_%d", len(d.led.Tickets)+1), OrderID: in.OrderID, Subject: in.Subject, Body: in.Body,
		Key: key, Created: d.cfg.Now().Unix(), Traceparent: traceparent}
	d.led.Tickets = append(d.led.Tickets, t)
	if err := d.save(); err != nil {
		d.led.Tickets = d.led.Tickets[:len(d.led.Tickets)-1]
		return Ticket{}, err
	}
	return t, nil
}

func (d *Desk) findTicket(key string) Found {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.reload() // a read answers from what this process last saw if the file cannot be read
	for _, t := range d.led.Tickets {
		if key != "" && t.Key == key {
			return Found{Found: true, Ticket: &t}
		}
	}
	return Found{}
}

func (d *Desk) issueVoucher(key, traceparent string, in VoucherArgs) (Voucher, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reload(); err != nil {
		return Voucher{}, err
	}
	if !d.cfg.IgnoreKeys && key != "" {
		for _, v := range d.led.Vouchers {
			if v.Key == key {
				return v, nil
			}
		}
	}
	v := Voucher{ID: fmt.Sprintf("vo_%d", len(d.led.Vouchers)+1), OrderID: in.OrderID, AmountCents: in.AmountCents,
		Currency: in.Currency, Key: key, Created: d.cfg.Now().Unix(), Traceparent: traceparent}
	d.led.Vouchers = append(d.led.Vouchers, v)
	if err := d.save(); err != nil {
		d.led.Vouchers = d.led.Vouchers[:len(d.led.Vouchers)-1]
		return Voucher{}, err
	}
	return v, nil
}

func (d *Desk) findVoucher(key string) Found {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.reload() // a read answers from what this process last saw if the file cannot be read
	for _, v := range d.led.Vouchers {
		if key != "" && v.Key == key {
			return Found{Found: true, Voucher: &v}
		}
	}
	return Found{}
}
