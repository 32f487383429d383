package payments

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// queue queues a fault through the API and returns the queued faults.
func (e *env) queue(mode string, count int) []Fault {
	e.t.Helper()
	resp := e.do(http.MethodPost, "/v1/sandbox/faults", `{"mode":"`+mode+`","count":`+strconv.Itoa(count)+`}`)
	require.Equal(e.t, http.StatusOK, resp.status, string(resp.body))
	return decodeAs[struct{ Data []Fault }](e.t, resp.body).Data
}

// faulted sends a refund under a fault given in the header or queued.
func faulted(e *env, queued bool, mode, key string) (response, error) {
	if queued {
		e.queue(mode, 1)
		return e.send(http.MethodPost, "/v1/refunds", body(300, "usd"), "Idempotency-Key", key)
	}
	return e.send(http.MethodPost, "/v1/refunds", body(300, "usd"), "Idempotency-Key", key, HeaderFault, mode)
}

func TestFault_DropAfterApply(t *testing.T) {
	t.Parallel()
	for name, queued := range map[string]bool{"header": false, "queued": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)

			_, err := faulted(e, queued, FaultDropAfterApply, "k1")

			require.Error(t, err, "the client gets no answer")
			refunds := e.run.Refunds()
			require.Len(t, refunds, 1, "but the refund was applied")
			require.Equal(t, refunds[0].ID, e.okRefund("k1", body(300, "usd")).ID, "a retry replays it")
		})
	}
}

func TestFault_ErrorAfterApply(t *testing.T) {
	t.Parallel()
	for name, queued := range map[string]bool{"header": false, "queued": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)

			resp, err := faulted(e, queued, FaultErrorAfterApply, "k1")

			require.NoError(t, err)
			require.Equal(t, TypeAPI, apiError(t, resp, http.StatusInternalServerError).Type)
			require.Len(t, e.run.Refunds(), 1)
		})
	}
}

func TestFault_ErrorBeforeApply(t *testing.T) {
	t.Parallel()
	for name, queued := range map[string]bool{"header": false, "queued": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)

			resp, err := faulted(e, queued, FaultErrorBeforeApply, "k1")

			require.NoError(t, err)
			require.Equal(t, TypeAPI, apiError(t, resp, http.StatusInternalServerError).Type)
			require.Empty(t, e.run.Refunds())
			require.Len(t, e.list(""), 0)
		})
	}
}

func TestFault_QueuedCountIsConsumedByRefundRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.queue(FaultErrorBeforeApply, 2)

	e.list("") // reads do not consume refund faults
	apiError(t, e.refund("k1", body(100, "usd")), http.StatusInternalServerError)
	apiError(t, e.refund("k1", body(100, "usd")), http.StatusInternalServerError)

	require.Empty(t, e.run.Refunds())
	e.okRefund("k1", body(100, "usd"))
	require.Empty(t, e.run.Faults())
}

func TestFault_ReadUnavailable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.okRefund("k1", body(100, "usd"))

	t.Run("header", func(t *testing.T) {
		resp := e.do(http.MethodGet, "/v1/refunds", "", HeaderFault, FaultReadUnavailable)
		got := apiError(t, resp, http.StatusServiceUnavailable)
		require.Equal(t, APIError{Type: TypeAPI, Code: CodeUnavailable}, APIError{Type: got.Type, Code: got.Code})
	})
	t.Run("queued", func(t *testing.T) {
		e.queue(FaultReadUnavailable, 2)
		e.okRefund("k2", body(100, "usd")) // writes do not consume it
		for range 2 {
			apiError(t, e.do(http.MethodGet, "/v1/refunds", ""), http.StatusServiceUnavailable)
		}
		require.Len(t, e.list(""), 2)
	})
}

func TestFault_CountZeroClearsMode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.queue("delay=2000ms", 3)
	require.Equal(t, []Fault{{Mode: "delay=2s", Count: 3}, {Mode: FaultErrorBeforeApply, Count: 5}},
		e.queue(FaultErrorBeforeApply, 5))

	require.Equal(t, []Fault{{Mode: "delay=2s", Count: 3}}, e.queue(FaultErrorBeforeApply, 0))
	require.Empty(t, e.queue("delay=2s", 0))

	resp := e.do(http.MethodGet, "/v1/sandbox/faults", "")
	require.Equal(t, `{"data":[]}`+"\n", string(resp.body))
	e.okRefund("k1", body(100, "usd"))
}

func TestFault_UnknownModeIs400(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cases := map[string]response{
		"endpoint":       e.do(http.MethodPost, "/v1/sandbox/faults", `{"mode":"explode","count":1}`),
		"bad delay":      e.do(http.MethodPost, "/v1/sandbox/faults", `{"mode":"delay=soon","count":1}`),
		"header":         e.refund("k1", body(100, "usd"), HeaderFault, "explode"),
		"read on write":  e.refund("k1", body(100, "usd"), HeaderFault, FaultReadUnavailable),
		"write on read":  e.do(http.MethodGet, "/v1/refunds", "", HeaderFault, FaultDropAfterApply),
		"negative count": e.do(http.MethodPost, "/v1/sandbox/faults", `{"mode":"error_before_apply","count":-1}`),
	}
	for name, resp := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, TypeInvalidRequest, apiError(t, resp, http.StatusBadRequest).Type)
		})
	}
	require.Empty(t, e.run.Refunds())
	require.Empty(t, e.run.Faults())
	require.ErrorIs(t, e.run.SetFault("explode", 1), ErrUnknownFault)
}

func TestFault_HeaderWinsAndConsumesNothingQueued(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.queue(FaultErrorBeforeApply, 1)

	e.okRefund("k1", body(100, "usd"), HeaderFault, "delay=1ms")

	require.Equal(t, []Fault{{Mode: FaultErrorBeforeApply, Count: 1}}, e.run.Faults())
}

func TestFault_OldestQueuedModeFirst(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.queue(FaultErrorAfterApply, 1)
	e.queue(FaultErrorBeforeApply, 1)

	apiError(t, e.refund("k1", body(100, "usd")), http.StatusInternalServerError)

	require.Len(t, e.run.Refunds(), 1, "error_after_apply, queued first, applied the refund")
	require.Equal(t, []Fault{{Mode: FaultErrorBeforeApply, Count: 1}}, e.run.Faults())
}

func TestClose_EndsDelayedRequestsWithoutApplying(t *testing.T) {
	t.Parallel()
	e := setup(t)
	answered := make(chan response, 1)
	go func() {
		resp, _ := e.send(http.MethodPost, "/v1/refunds", body(100, "usd"), "Idempotency-Key", "k1", HeaderFault, "delay=1m")
		answered <- resp
	}()
	require.Eventually(t, func() bool {
		e.run.mu.Lock()
		defer e.run.mu.Unlock()
		return len(e.run.inFlight) == 1
	}, 5*time.Second, 5*time.Millisecond)

	start := time.Now()
	require.NoError(t, e.run.Close())

	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, CodeUnavailable, apiError(t, <-answered, http.StatusServiceUnavailable).Code)
	require.Empty(t, e.run.Refunds())
}
