// Package alerts delivers oncerun's alerts to a webhook (ALERT_WEBHOOK_URL),
// a JSON POST per alert whose "alert" field names its kind.
//
// # Expiry alerts
//
// The expiry watchdog's alerts ([KeyExpired]) are posted by [Webhook.Send]:
// retried with backoff in the background, so that a slow or failing
// receiver never holds up pruning. Their rows in key_expiry_alerts are the
// record; the POST is best-effort.
//
// # Approval deadline warnings
//
// A warning that a step still waits for a decision near its deadline
// ([ApprovalDeadline]) is posted by [DeadlineWarner] through [Webhook.Post]:
// once, in the caller's context, with the warning's id as the
// Idempotency-Key header. A failure is returned, and the warning's activity
// is retried by Temporal, so a warning reaches the receiver at least once,
// and a receiver that drops repeated ids sees it once.
//
// # Redirects
//
// The webhook follows none: a 3xx is a failed delivery like any answer but
// a 2xx. Following one would turn a POST answered 302 into an empty GET
// that the next host answers 200 (the alert lost, counted delivered), and
// send the body and its Idempotency-Key wherever a 307 points.
package alerts

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// KeyExpired is the body of an alert: a key whose retention ran out while
// its run was still open.
type KeyExpired struct {
	Alert     string    `json:"alert"` // always "key_expired_while_run_alive"
	Tenant    string    `json:"tenant"`
	RunID     string    `json:"run_id"`
	Step      int64     `json:"step"`
	Tool      string    `json:"tool"`
	Key       string    `json:"key"`
	Policy    string    `json:"policy"`
	RunState  string    `json:"run_state"`
	KeyState  string    `json:"key_state"`
	AgeSec    float64   `json:"age_seconds"`
	ExpiredAt time.Time `json:"expired_at"`
	RaisedAt  time.Time `json:"raised_at"`
}

// Webhook posts alerts to a URL. It follows no redirect: a 3xx answer is a
// failed delivery like any other answer but a 2xx, so that an alert is
// never counted delivered by a GET that a 302 made of it, and its body and
// Idempotency-Key never go to a host the Location names.
type Webhook struct {
	// URL receives the POSTs (ALERT_WEBHOOK_URL).
	URL string
	// Client sends them, its CheckRedirect replaced by one that refuses
	// every redirect. Default: a client with a 10 s timeout.
	Client *http.Client
	// Attempts is how many times one alert is tried. Default 5.
	Attempts int
	// Backoff is the wait before the second attempt, doubled each time.
	// Default 1 s.
	Backoff time.Duration
	// Log receives delivery failures. Default: none.
	Log *zap.Logger

	once     sync.Once
	client   *http.Client
	inflight chan struct{}
	wg       sync.WaitGroup
}

// maxInflight bounds the deliveries in progress; alerts beyond it are
// dropped (and logged): the log line and the table row remain.
const maxInflight = 64

func (w *Webhook) init() {
	w.once.Do(func() {
		w.Client = cmp.Or(w.Client, &http.Client{Timeout: 10 * time.Second})
		c := *w.Client
		c.CheckRedirect = untrusted.NoRedirects.CheckRedirect
		w.client = &c
		w.Attempts = cmp.Or(w.Attempts, 5)
		w.Backoff = cmp.Or(w.Backoff, time.Second)
		w.Log = cmp.Or(w.Log, zap.NewNop())
		w.inflight = make(chan struct{}, maxInflight)
	})
}

// Send delivers a in the background and returns at once. A nil Webhook
// sends nothing.
func (w *Webhook) Send(a KeyExpired) {
	if w == nil || w.URL == "" {
		return
	}
	w.init()
	select {
	case w.inflight <- struct{}{}:
	default:
		w.Log.Error("alert webhook backlog full; alert not posted", zap.String("key", a.Key))
		return
	}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.inflight; w.wg.Done() }()
		if err := w.deliver(a); err != nil {
			w.Log.Error("alert webhook failed", zap.String("key", a.Key), zap.Error(err))
		}
	}()
}

// Wait waits for the deliveries in progress.
func (w *Webhook) Wait() {
	if w != nil {
		w.wg.Wait()
	}
}

// WaitFor waits for the deliveries in progress for at most d, and reports
// whether they all ended.
func (w *Webhook) WaitFor(d time.Duration) bool {
	if w == nil {
		return true
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (w *Webhook) deliver(a KeyExpired) error {
	body, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode alert: %w", err)
	}
	wait := w.Backoff
	var last error
	for attempt := 1; attempt <= w.Attempts; attempt++ {
		if last = w.post(context.Background(), body, ""); last == nil {
			return nil
		}
		if attempt < w.Attempts {
			time.Sleep(wait)
			wait *= 2
		}
	}
	return fmt.Errorf("after %d attempts: %w", w.Attempts, last)
}

// Post sends v as one JSON POST now, within ctx and the Client's timeout,
// and reports whether the receiver took it (a 2xx answer). It does not
// retry: the caller does, with the same idempotencyKey, sent as the
// Idempotency-Key header when not empty. A nil Webhook, or one without a
// URL, posts nothing and reports success.
func (w *Webhook) Post(ctx context.Context, v any, idempotencyKey string) error {
	if w == nil || w.URL == "" {
		return nil
	}
	w.init()
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode alert: %w", err)
	}
	return w.post(ctx, body, idempotencyKey)
}

func (w *Webhook) post(ctx context.Context, body []byte, idempotencyKey string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			// It would repeat the whole URL, or the Location of a refused
			// redirect as the receiver sent it.
			err = uerr.Err
		}
		return fmt.Errorf("POST to %s: %w", w.endpoint(), err)
	}
	// Read a little of the answer so that the connection can be reused, and
	// to say what a refusal said.
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST to %s: HTTP %d %s%s", w.endpoint(), resp.StatusCode, http.StatusText(resp.StatusCode), excerpt(answer))
	}
	return nil
}

// maxExcerpt bounds what an error repeats of a receiver's answer.
const maxExcerpt = 200

// excerpt is what an error repeats of a receiver's answer: its first
// maxExcerpt bytes on one line, escaped (untrusted.Clean), as it goes to logs
// and to the run's Temporal history; nothing when it is empty. The status
// line's own text is not repeated: the receiver chose it too.
func excerpt(answer []byte) string {
	text := strings.Join(strings.Fields(string(answer)), " ")
	if text == "" {
		return ""
	}
	return ": " + untrusted.Clean(text, maxExcerpt)
}

// endpoint names the receiver in errors: the URL's scheme and host only.
// Webhook URLs often carry their secret in the path (as Slack's do), and a
// Post's error is kept in the run's Temporal history, not only in a log.
func (w *Webhook) endpoint() string {
	u, err := url.Parse(w.URL)
	if err != nil || u.Host == "" {
		return "the alert webhook"
	}
	return "the alert webhook at " + untrusted.Origin(u)
}
