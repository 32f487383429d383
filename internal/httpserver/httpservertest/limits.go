package httpservertest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/httpserver"
)

// RefusesLargeHeaders fails t unless the server at url answers a request
// whose headers are twice httpserver.DefaultMaxHeaderBytes (well within
// net/http's own default of 1 MiB) with 431. The body of the answer is not
// read: the server hangs up after it.
func RefusesLargeHeaders(t *testing.T, method, url string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", 2*httpserver.DefaultMaxHeaderBytes))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode, "%s %s with %d bytes of headers",
		method, url, 2*httpserver.DefaultMaxHeaderBytes)
}
