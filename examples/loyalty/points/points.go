// Package points is the loyalty deployment's own tool, award_points, and
// the table it writes. Both of the module's commands register it: the
// production one (the module's root) and its dev stack (./dev).
package points

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncerun/oncerun/starter/oncerun"
	"github.com/oncerun/oncerun/tools"
)

// Options adds the tool and its table to oncerun's command line.
func Options() oncerun.Options {
	return oncerun.Options{Tools: []tools.Tool{AwardPoints}, Setup: Setup}
}

// schema is the table award_points writes. The unique idempotency_key
// column is what makes a keyed tool's effect once: the row commits in the
// transaction that completes the step's key.
const schema = `
CREATE TABLE IF NOT EXISTS loyalty_points (
	id              bigserial PRIMARY KEY,
	tenant          text NOT NULL,
	customer_id     text NOT NULL,
	points          integer NOT NULL CHECK (points > 0),
	reason          text NOT NULL,
	idempotency_key text NOT NULL UNIQUE,
	created_at      timestamptz NOT NULL DEFAULT now()
)`

// approvalThreshold: awards above it wait for a person.
const approvalThreshold = 1000

type awardArgs struct {
	CustomerID string `json:"customer_id"`
	Points     int    `json:"points"`
	Reason     string `json:"reason"`
}

// AwardPoints grants a customer loyalty points, once per step.
var AwardPoints = tools.Tool{
	Name:        "award_points",
	Description: fmt.Sprintf("Grant a customer loyalty points. Awards above %d points wait for a person's approval.", approvalThreshold),
	Schema: json.RawMessage(`{"type":"object","properties":{
		"customer_id":{"type":"string","minLength":1,"maxLength":64},
		"points":{"type":"integer","minimum":1,"maximum":100000},
		"reason":{"type":"string","minLength":1,"maxLength":200}},
		"required":["customer_id","points","reason"],"additionalProperties":false}`),
	Class: tools.ClassKeyed,
	Approval: tools.When(fmt.Sprintf("points above %d", approvalThreshold), func(args json.RawMessage) (bool, error) {
		var a awardArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return false, err
		}
		return a.Points > approvalThreshold, nil
	}),
	Run: func(ctx context.Context, call tools.Call) (any, error) {
		var a awardArgs
		if err := call.Decode(&a); err != nil {
			return nil, err
		}
		var id int64
		err := call.Tx.QueryRow(ctx, `
INSERT INTO loyalty_points (tenant, customer_id, points, reason, idempotency_key)
VALUES ($1, $2, $3, $4, $5) RETURNING id`,
			call.Key.Tenant, a.CustomerID, a.Points, a.Reason, call.Key.String()).Scan(&id)
		if err != nil {
			return nil, fmt.Errorf("award points: %w", err)
		}
		return map[string]any{"award_id": id, "customer_id": a.CustomerID, "points": a.Points}, nil
	},
}

// Setup creates the table AwardPoints writes; every worker runs it at
// start, after oncerun's migrations.
func Setup(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, schema)
	return err
}
