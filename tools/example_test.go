package tools_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/oncerun/oncerun/internal/planner"
	"github.com/oncerun/oncerun/internal/shop"
	"github.com/oncerun/oncerun/tools"
)

// A tool of your own: a keyed write whose dedup row and insert commit in one
// transaction, registered beside the built-in tools.
func ExampleNewRegistry() {
	tag := tools.Tool{
		Name:        "tag_order",
		Description: "Tag an order.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"tag":{"type":"string"}},"required":["order_id","tag"]}`),
		Class:       tools.ClassKeyed,
		Approval:    tools.Always(),
		Run: func(ctx context.Context, call tools.Call) (any, error) {
			var a struct {
				OrderID string `json:"order_id"`
				Tag     string `json:"tag"`
			}
			if err := call.Decode(&a); err != nil {
				return nil, err
			}
			_, err := call.Tx.Exec(ctx, `INSERT INTO order_tags (tenant, order_id, tag) VALUES ($1, $2, $3)`,
				call.Key.Tenant, a.OrderID, a.Tag)
			return map[string]string{"tagged": a.OrderID}, err
		},
	}
	reg, err := tools.NewRegistry(tools.RegistryConfig{}, append(shop.Tools(shop.Config{}), tag)...)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reg.Names())

	p, err := reg.Prepare(planner.Call{Tool: "tag_order", Args: json.RawMessage(`{"tag": "vip", "order_id": "1001"}`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(p.Args), p.NeedsApproval)

	_, err = reg.Prepare(planner.Call{Tool: "tag_order", Args: json.RawMessage(`{"order_id": 1001}`)})
	fmt.Println(err)
	// Output:
	// [add_order_note get_credit issue_credit lookup_order tag_order]
	// {"order_id":"1001","tag":"vip"} true
	// arguments of tag_order do not match its schema: at /: missing property 'tag'; at /order_id: got number, want string: invalid tool call
}
