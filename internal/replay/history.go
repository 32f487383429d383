package replay

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/oncerun/oncerun/internal/keys"
)

// Execution names the history of one run: a workflow execution of
// Temporal, or a JSON file of one.
type Execution struct {
	// WorkflowID is the run's workflow ID (workflows.WorkflowID).
	WorkflowID string
	// RunID is Temporal's run ID of the execution; empty means the
	// workflow's latest.
	RunID string
	// File, when set, is a JSON history file (as `temporal workflow show
	// --output json` writes it) to read instead of asking Temporal.
	File string
}

// WorkflowType is the workflow type of an agent run: a listing's query is
// always narrowed to it.
const WorkflowType = "AgentRun"

// ListQuery is the visibility query that lists the agent runs query
// matches: query ANDed with the agent run's workflow type (every agent run
// when query is empty).
func ListQuery(query string) string {
	typ := fmt.Sprintf("WorkflowType = %q", WorkflowType)
	if query == "" {
		return typ
	}
	return "(" + query + ") AND " + typ
}

// List lists up to limit workflow executions of agent runs that the
// visibility query query matches (see ListQuery), sorted by workflow ID
// and run ID. more reports that the query matched more than limit.
func List(ctx context.Context, tc client.Client, query string, limit int) (execs []Execution, more bool, err error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("limit %d: want at least 1", limit)
	}
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: ListQuery(query), PageSize: int32(min(limit-len(execs), listPageSize)), NextPageToken: token,
		})
		if err != nil {
			return nil, false, fmt.Errorf("list runs (%s): %w", ListQuery(query), err)
		}
		for _, e := range resp.GetExecutions() {
			if len(execs) == limit {
				return sorted(execs), true, nil
			}
			execs = append(execs, Execution{WorkflowID: e.GetExecution().GetWorkflowId(), RunID: e.GetExecution().GetRunId()})
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return sorted(execs), false, nil
		}
		if len(execs) == limit {
			return sorted(execs), true, nil
		}
	}
}

// sorted sorts execs by workflow ID and run ID, so that a report's order
// does not depend on the order visibility answered in.
func sorted(execs []Execution) []Execution {
	slices.SortFunc(execs, func(a, b Execution) int {
		return cmp.Or(strings.Compare(a.WorkflowID, b.WorkflowID), strings.Compare(a.RunID, b.RunID))
	})
	return execs
}

// listPageSize is how many executions one page of a listing asks for.
// Visibility stores answer pages of 100 quickly; SQLite's (the dev
// server's) takes seconds for a page of 500 and more than the SDK's 10 s
// deadline for 1,000.
const listPageSize = 100

// fetch returns the whole history of e: every event, every page.
func fetch(ctx context.Context, tc client.Client, e Execution) (*historypb.History, error) {
	if e.File != "" {
		return ReadFile(e.File)
	}
	if tc == nil {
		return nil, errors.New("no Temporal client to read the history from")
	}
	it := tc.GetWorkflowHistory(ctx, e.WorkflowID, e.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("read the history of %s: %w", e.WorkflowID, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
}

// maxFileBytes bounds a history file: Temporal's own limit on a history
// is 50 MiB.
const maxFileBytes = 64 << 20

// ReadFile reads a JSON history file, as `temporal workflow show --output
// json` and oncerun's recorded histories (workflows/testdata/histories)
// are written.
func ReadFile(path string) (*historypb.History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("history file %s: %w", path, err)
	}
	if len(raw) > maxFileBytes {
		return nil, fmt.Errorf("history file %s is larger than %d bytes", path, maxFileBytes)
	}
	return parseHistory(path, raw)
}

// parseHistory reads the JSON history raw of the file named name.
func parseHistory(name string, raw []byte) (*historypb.History, error) {
	h := &historypb.History{}
	if err := (temporalproto.CustomJSONUnmarshalOptions{DiscardUnknown: true}).Unmarshal(bytes.TrimSpace(raw), h); err != nil {
		return nil, fmt.Errorf("history file %s is not a JSON history (as `temporal workflow show --output json` writes it): %w", name, err)
	}
	if len(h.GetEvents()) == 0 {
		return nil, fmt.Errorf("history file %s has no events", name)
	}
	if h.Events[0].GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED {
		return nil, fmt.Errorf("history file %s does not begin with WorkflowExecutionStarted (event 1 is %s)", name, h.Events[0].GetEventType())
	}
	return h, nil
}

// tenantAndRun returns the tenant and run id of the workflow ID id, or
// empty strings for an ID that is not an agent run's.
func tenantAndRun(id string) (tenant, runID string) {
	tenant, runID, _ = keys.ParseWorkflowID(id)
	return tenant, runID
}

// decode reads payloads into v with the default data converter, which is
// the one oncerun's clients and workers use.
func decode(p *commonpb.Payloads, v any) error {
	if p == nil {
		return errors.New("no payload")
	}
	return converter.GetDefaultDataConverter().FromPayloads(p, v)
}
