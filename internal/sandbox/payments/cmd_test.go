package payments

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var listeningLine = regexp.MustCompile(`sandbox-payments listening on (http://127\.0\.0\.1:\d+)\n`)

func TestCommand_ServesUntilCancelled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	paymentsFile := filepath.Join(t.TempDir(), "payments.json")
	require.NoError(t, os.WriteFile(paymentsFile, []byte(`[{"id":"pi_cmd","amount":700,"currency":"EUR"}]`), 0o600))
	var stdout, stderr syncBuffer
	cmd := Command()
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--addr", "127.0.0.1:0", "--data-dir", dir, "--payments", paymentsFile,
		"--api-key", "sk_test_cmd", "--key-retention", "1h"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	var url string
	require.Eventually(t, func() bool {
		m := listeningLine.FindStringSubmatch(stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "stdout: %q", stdout.String())
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/refunds",
		strings.NewReader(`{"payment_id":"pi_cmd","amount":700,"currency":"eur"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk_test_cmd")
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not stop when its context was cancelled")
	}
	s, err := New(Config{DataDir: dir, KeyRetention: time.Hour})
	require.NoError(t, err)
	require.Len(t, s.Refunds(), 1)
	require.Contains(t, stderr.String(), `"idempotency_key":"k1"`, "request lines are logged to stderr")
}

func TestCommand_RejectsBadFlags(t *testing.T) {
	t.Parallel()
	badFile := filepath.Join(t.TempDir(), "payments.json")
	require.NoError(t, os.WriteFile(badFile, []byte(`{"id":"pi_1"}`), 0o600))
	for name, tc := range map[string]struct {
		args    []string
		mention string
	}{
		"no data dir":       {[]string{"--addr", "127.0.0.1:0"}, "data-dir"},
		"zero retention":    {[]string{"--data-dir", t.TempDir(), "--key-retention", "0s"}, "--key-retention"},
		"bad retention":     {[]string{"--data-dir", t.TempDir(), "--key-retention", "soon"}, "key-retention"},
		"bad payments file": {[]string{"--data-dir", t.TempDir(), "--payments", badFile}, "payments file"},
		"missing file":      {[]string{"--data-dir", t.TempDir(), "--payments", badFile + ".nope"}, "payments file"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := Command()
			cmd.SetOut(&syncBuffer{})
			cmd.SetErr(&syncBuffer{})
			cmd.SetArgs(tc.args)

			err := cmd.ExecuteContext(t.Context())

			require.ErrorContains(t, err, tc.mention)
		})
	}
}
