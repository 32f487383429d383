// Package sdkfake gives tests that mock Temporal's client the answers its
// calls return: a query's value and an update's handle, each carrying a
// value as JSON, as Temporal's default data converter would.
package sdkfake

import (
	"context"
	"encoding/json"

	"go.temporal.io/sdk/client"
)

// Value is a query's answer: V, read back as JSON.
type Value struct{ V any }

// HasValue reports that the answer holds a value.
func (Value) HasValue() bool { return true }

// Get decodes V into ptr through JSON.
func (v Value) Get(ptr any) error {
	raw, err := json.Marshal(v.V)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, ptr)
}

// Update is an update's handle: its answer is V, or Err.
type Update struct {
	client.WorkflowUpdateHandle
	V   any
	Err error
}

// Get returns Err, or decodes V into ptr through JSON.
func (u Update) Get(_ context.Context, ptr any) error {
	if u.Err != nil {
		return u.Err
	}
	return Value{u.V}.Get(ptr)
}
