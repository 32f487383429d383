package alerts

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/oncerun/oncerun/activities"
	"github.com/oncerun/oncerun/internal/metrics"
)

// AlertApprovalDeadline is the "alert" field of an [ApprovalDeadline].
const AlertApprovalDeadline = "approval_deadline_warning"

// ApprovalDeadline is the body of an approval deadline warning: a step
// still waits for a decision and its deadline comes near. Its fields hold
// nothing that changes between attempts, so a retried POST sends the same
// bytes.
type ApprovalDeadline struct {
	// Alert is always AlertApprovalDeadline.
	Alert string `json:"alert"`
	// ID is the same for every delivery of one warning: see
	// [DeadlineWarningID]. It is also the Idempotency-Key header.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
	Step   int64  `json:"step"`
	Tool   string `json:"tool"`
	// Deadline is when the step expires undecided, in RFC 3339, UTC.
	Deadline time.Time `json:"deadline"`
	// Before is how long before the deadline the warning was due, as Go
	// writes a duration ("24h0m0s"); BeforeSeconds is the same in seconds.
	Before        string  `json:"before"`
	BeforeSeconds float64 `json:"before_seconds"`
	// OnExpiry is what the deadline will do to the step: "expire" or
	// "reject"; empty when the run did not say.
	OnExpiry string `json:"on_expiry"`
}

// DeadlineWarningID is the id of the warning of step step of run runID of
// tenant, before its deadline:
// approval_deadline_warning/<tenant>/<run id>/<step>/<before>, each part
// escaped as a URL path segment, so that it is plain ASCII, fit for a
// header, and two warnings never share it. It holds no time or attempt:
// every delivery of a warning carries the same id.
func DeadlineWarningID(tenant, runID string, step int64, before time.Duration) string {
	return AlertApprovalDeadline + "/" + url.PathEscape(tenant) + "/" + url.PathEscape(runID) + "/" +
		strconv.FormatInt(step, 10) + "/" + url.PathEscape(before.String())
}

// NewApprovalDeadline returns the body that tells of w.
func NewApprovalDeadline(w activities.DeadlineWarning) ApprovalDeadline {
	return ApprovalDeadline{
		Alert: AlertApprovalDeadline, ID: DeadlineWarningID(w.Tenant, w.RunID, w.Step, w.Before),
		Tenant: w.Tenant, RunID: w.RunID, Step: w.Step, Tool: w.Tool, Deadline: w.Deadline.UTC(),
		Before: w.Before.String(), BeforeSeconds: w.Before.Seconds(), OnExpiry: w.OnExpiry,
	}
}

// DeadlineWarner delivers approval deadline warnings beyond the activity's
// log line (it is the worker's activities.DeadlineWarner): it counts each
// in oncerun_approval_deadline_warnings_total and posts it to the Webhook.
//
// The POST is synchronous and its failure is returned, so that Temporal
// retries the warning's activity: the run schedules each warning once, and
// a retried POST carries the same id, so the receiver gets it at least once
// and can drop repeats by id. (The expiry alerts' background retries would
// give up after five tries, or drop a warning when their backlog is full,
// with no record left but the log.)
type DeadlineWarner struct {
	// Webhook receives the warnings. Nil or without a URL: the metric only.
	Webhook *Webhook
	// Metrics counts the warnings. Nil: no metric.
	Metrics *metrics.Metrics
}

var _ activities.DeadlineWarner = (*DeadlineWarner)(nil)

// DeadlineWarning counts w and posts it. The count is taken on the
// activity's first attempt only, so that retries of a failing webhook do
// not count one warning many times.
func (d *DeadlineWarner) DeadlineWarning(ctx context.Context, w activities.DeadlineWarning) error {
	if firstAttempt(ctx) {
		d.Metrics.ApprovalDeadlineWarning(w.Tenant, w.Tool, w.Before)
	}
	body := NewApprovalDeadline(w)
	if err := d.Webhook.Post(ctx, body, body.ID); err != nil {
		return fmt.Errorf("post deadline warning %s: %w", body.ID, err)
	}
	return nil
}

// firstAttempt reports whether ctx is the first attempt of an activity, or
// no activity's at all (a direct call).
func firstAttempt(ctx context.Context) bool {
	return !activity.IsActivity(ctx) || activity.GetInfo(ctx).Attempt <= 1
}
