package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// The refund tool of an MCP server over Streamable HTTP, made an oncerun
// tool that promises once: the server honours the idempotency key, which
// each call carries in _meta.
func ExampleLoad() {
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "payments", Version: "v1"}, nil)
	type args struct {
		AmountCents int64 `json:"amount_cents"`
	}
	mcpsdk.AddTool(srv, &mcpsdk.Tool{Name: "refund", Description: "Refund a payment."},
		func(ctx context.Context, req *mcpsdk.CallToolRequest, in args) (*mcpsdk.CallToolResult, map[string]any, error) {
			return nil, map[string]any{"refunded": in.AmountCents, "key": req.Params.Meta[mcp.MetaIdempotencyKey]}, nil
		})
	hs := httptest.NewServer(mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil))
	defer hs.Close()

	cfg, err := mcp.ParseConfig(fmt.Appendf(nil, `
servers:
  - name: payments
    transport: http
    url: %s
    tools:
      refund: {idempotent: true, approval: {field: amount_cents, above: 10000}}
`, hs.URL), "yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := mcp.Load(context.Background(), cfg, mcp.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	for _, t := range d.Tools {
		fmt.Println(t.Name, t.Class, t.Guarantee(), "approval", t.Approval, "from", d.Sources[t.Name].Tool)
	}

	key, _ := keys.New("acme", "run-1", 1, "payments_refund")
	res, err := d.Tools[0].Run(context.Background(), tools.Call{Key: key, Args: json.RawMessage(`{"amount_cents":500}`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	// Output:
	// payments_refund external once approval when amount_cents above 10000 from refund
	// {"key":"v1/acme/run-1/1/payments_refund","refunded":500}
}
