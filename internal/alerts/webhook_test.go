package alerts_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/oncerun/oncerun/internal/alerts"
)

// redirectTo starts a receiver that answers every POST with status and a
// Location on target's origin, under a path that stands for a secret, and
// returns its URL and the receiver, which keeps what it got.
func redirectTo(t *testing.T, status int, target string) (string, *receiver) {
	t.Helper()
	rcv := &receiver{statuses: []int{status}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", target+"/hooks/s3cret")
		rcv.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hooks/s3cret", rcv
}

// otherReceiver starts a receiver answering 200, where the redirects point.
func otherReceiver(t *testing.T) (string, *receiver) {
	t.Helper()
	rcv := &receiver{statuses: []int{http.StatusOK}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	return srv.URL, rcv
}

var redirects = []int{http.StatusFound, http.StatusTemporaryRedirect}

func TestAPostAnsweredWithARedirectIsNotDeliveredAndNothingReachesItsTarget(t *testing.T) {
	t.Parallel()
	for _, status := range redirects {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			otherURL, other := otherReceiver(t)
			url, first := redirectTo(t, status, otherURL)
			warner := &alerts.DeadlineWarner{Webhook: &alerts.Webhook{URL: url}}

			err := warner.DeadlineWarning(context.Background(), warning)

			require.Error(t, err, "not delivered: the activity is retried")
			assert.ErrorContains(t, err, "refused a redirect")
			assert.ErrorContains(t, err, otherURL)
			assert.NotContains(t, err.Error(), "s3cret", "the Location's path is not repeated")
			assert.Len(t, first.posts(), 1)
			assert.Empty(t, other.posts(), "neither the body nor the Idempotency-Key went elsewhere")
		})
	}
}

func TestAnAlertAnsweredWithARedirectIsRetriedThenLoggedAsFailed(t *testing.T) {
	t.Parallel()
	for _, status := range redirects {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			otherURL, other := otherReceiver(t)
			url, first := redirectTo(t, status, otherURL)
			core, logs := observer.New(zap.ErrorLevel)
			w := &alerts.Webhook{URL: url, Attempts: 2, Backoff: time.Millisecond, Log: zap.New(core)}

			w.Send(alerts.KeyExpired{Alert: "key_expired_while_run_alive", Key: "v1/acme/r1/1/refund_payment"})
			w.Wait()

			assert.Len(t, first.posts(), 2, "retried as other failures are")
			assert.Empty(t, other.posts())
			failed := logs.FilterMessage("alert webhook failed").All()
			require.Len(t, failed, 1, "not delivered")
			assert.Contains(t, failed[0].ContextMap()["error"], "refused a redirect")
		})
	}
}

func TestARefusalsAnswerIsRepeatedCutAndEscaped(t *testing.T) {
	t.Parallel()
	answer := "invalid_token\n\x1b[2J" + strings.Repeat("x", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, answer, http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	w := &alerts.Webhook{URL: srv.URL}

	err := w.Post(context.Background(), map[string]string{"alert": "test"}, "")

	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 403 Forbidden: invalid_token \\u001b[2Jxxx")
	assert.NotContains(t, err.Error(), "\x1b")
	assert.NotContains(t, err.Error(), "\n")
	assert.Less(t, len(err.Error()), 400, "cut")
}
