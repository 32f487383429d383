package mcp_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/mcp"
	"github.com/oncerun/oncerun/tools"
)

// The configuration chooses where the key goes: the commerce protocols'
// _meta names instead of oncerun's, and no header.
func TestAServersKeyConventionSaysWhereTheKeyGoes(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	cfg := httpConfig("pay", s.URL, payTools(true))
	cfg.IdempotencyKey = mcp.KeyConvention{Meta: []string{mcp.MetaACP, mcp.MetaUCP}, Header: new(false)}
	d := load(t, cfg)
	call := callOf(t, "pay_refund", 1, refundArgs)
	require.NoError(t, run(t, toolOf(t, d, "pay_refund"), call, nil))

	seen := s.Ledger.Seen()
	require.Len(t, seen, 1)
	key := call.Key.String()
	assert.Equal(t, key, seen[0].AllMeta[mcp.MetaACP], "ACP's meta.idempotency_key")
	assert.Equal(t, key, seen[0].AllMeta[mcp.MetaUCP], `UCP's meta["idempotency-key"]`)
	assert.NotContains(t, seen[0].AllMeta, mcp.MetaIdempotencyKey, "only the names configured")
	assert.Empty(t, seen[0].Header, "no header")
}

// A server that declares SEP-3182's tools.idempotency capability gets the
// key in the idempotencyKey field of tools/call, and is trusted for it: its
// tool promises once with no idempotent: true in the file, and a resend
// under the key makes no second refund. field: never withholds it.
func TestAServerThatDeclaresTheCapabilityGetsTheKeyInTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field   string
		refunds int
	}{
		{mcp.FieldAuto, 1},
		{mcp.FieldNever, 2},
	} {
		t.Run(tc.field, func(t *testing.T) {
			t.Parallel()
			s := startDeclaring(t, honouring)
			cfg := httpConfig("pay", s.URL, map[string]mcp.ToolConfig{"refund": {Approval: mcp.Approval{Rule: "never"}}})
			// Nowhere else: the field alone carries it, or nothing does.
			cfg.IdempotencyKey = mcp.KeyConvention{Meta: []string{"unused"}, Header: new(false), Field: tc.field}
			d := load(t, cfg)
			refund := toolOf(t, d, "pay_refund")
			call := callOf(t, "pay_refund", 1, refundArgs)
			for range 2 {
				require.NoError(t, run(t, refund, call, nil))
			}
			assert.Len(t, s.Ledger.refunds, tc.refunds)
			if tc.field == mcp.FieldNever {
				assert.Equal(t, []string{"", ""}, s.Fields())
				return
			}
			assert.Equal(t, []string{call.Key.String(), call.Key.String()}, s.Fields())
			assert.Equal(t, mcp.KeyDeclared, d.Sources["pay_refund"].KeyClaim)
			assert.Equal(t, tools.GuaranteeOnce, refund.Guarantee(), "a server that declares the capability is trusted for it")
		})
	}
}

// A server that does not declare the capability gets no field unless the
// convention says always.
func TestTheFieldGoesOnlyWhereItIsDeclaredOrAsked(t *testing.T) {
	t.Parallel()
	s := startHTTP(t, honouring)
	d := load(t, httpConfig("pay", s.URL, payTools(false)))
	assert.Empty(t, d.Sources["pay_refund"].KeyClaim, "no claim: a paired read settles it")
	require.NoError(t, run(t, toolOf(t, d, "pay_refund"), callOf(t, "pay_refund", 1, refundArgs), nil))
	seen := s.Ledger.Seen()
	require.Len(t, seen, 1)
	assert.NotEmpty(t, seen[0].Meta, "oncerun's own _meta name by default")
	assert.NotEmpty(t, seen[0].Header, "and the header over http")
}

// An idempotent: true claim with a probe is checked at start: a server
// that honours the key answers the probe's second call as its first (the
// claim verified); one that ignores it makes a second refund, and the
// start is refused naming the tool. Without a probe the claim is shown
// unverified.
func TestAProbeChecksAnIdempotencyClaimAtStart(t *testing.T) {
	t.Parallel()
	probed := func(variant string) (*httpServer, mcp.ServerConfig) {
		s := startHTTP(t, variant)
		tc := payTools(true)
		refund := tc["refund"]
		refund.Probe = &mcp.Probe{Args: map[string]any{"payment_id": "pay_probe", "amount_cents": 1}}
		tc["refund"] = refund
		return s, httpConfig("pay", s.URL, tc)
	}
	s, cfg := probed(honouring)
	d := load(t, cfg)
	assert.Equal(t, mcp.KeyUnverified, d.Sources["pay_refund"].KeyClaim, "only a worker's start probes")
	assert.Empty(t, s.Ledger.refunds, "asking for the tools makes no effect")
	d = loadProbing(t, cfg)
	assert.Equal(t, mcp.KeyVerified, d.Sources["pay_refund"].KeyClaim)
	assert.Len(t, s.Ledger.refunds, 2, "the probe made one refund under each of its two keys, as a server that honours keys does")

	s, cfg = probed(ignoring)
	_, err := mcp.Load(t.Context(), mcp.Config{Servers: []mcp.ServerConfig{cfg}}, mcp.Options{Probe: true})
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, `tool "refund" is configured idempotent: true, but the probe at start called it twice under one key`)
	assert.Contains(t, msg, "the server made a second effect")
	assert.Len(t, s.Ledger.refunds, 2)

	d = load(t, httpConfig("pay", startHTTP(t, ignoring).URL, payTools(true)))
	assert.Equal(t, mcp.KeyUnverified, d.Sources["pay_refund"].KeyClaim, "the file's word alone")

	// A tool that answers every call alike cannot be told from one that
	// honours keys: the claim stays unverified, and the start goes on.
	probe := &mcp.Probe{Args: map[string]any{}}
	d = loadProbing(t, httpConfig("mem", startHTTP(t, annotated).URL, map[string]mcp.ToolConfig{
		"add_note": {Idempotent: true, Probe: probe}}))
	assert.Equal(t, mcp.KeyUnverified, d.Sources["mem_add_note"].KeyClaim, "the same answer under another key proves nothing")

	// A tool that asks a question answers no probe.
	_, err = mcp.Load(t.Context(), mcp.Config{Servers: []mcp.ServerConfig{httpConfig("shop", asked(t).URL, map[string]mcp.ToolConfig{
		"order_shirt": {Idempotent: true, Probe: probe}})}}, mcp.Options{Probe: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the probe of its idempotent: true claim, call 1 of 3: it asked for input (size: "Which size?")`)
}

// asked is a server whose order_shirt answers with a question.
func asked(t *testing.T) *httpServer {
	s := startHTTP(t, asking)
	s.asksRaw.Store(true)
	return s
}

// The convention is checked with the configuration.
func TestAKeyConventionIsChecked(t *testing.T) {
	t.Parallel()
	cfg := mcp.Config{Servers: []mcp.ServerConfig{{Name: "local", Transport: mcp.TransportStdio, Command: "/bin/x",
		Unlisted: mcp.UnlistedApprove, IdempotencyKey: mcp.KeyConvention{Meta: []string{"a", "a", ""}, Header: new(true), Field: "sometimes"}}}}
	err := cfg.Validate()
	require.Error(t, err)
	for _, want := range []string{
		`idempotency_key.meta[1]: "a" twice`, "idempotency_key.meta[2]: empty name",
		"idempotency_key.header: a stdio server has no HTTP headers", `idempotency_key.field "sometimes": want auto, always or never`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// loadProbing loads servers as a worker's start does, probing claims.
func loadProbing(t *testing.T, servers ...mcp.ServerConfig) mcp.Discovered {
	t.Helper()
	d, err := mcp.Load(t.Context(), mcp.Config{Servers: servers}, mcp.Options{Probe: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// Over stdio too, the key goes under the configured _meta name: a server
// that reads ACP's idempotency_key answers a resend with the first refund.
func TestAStdioServerGetsTheKeyUnderTheConfiguredName(t *testing.T) {
	t.Parallel()
	cfg := stdioConfig(t, "local", honouring)
	cfg.Tools = stdioPayTools(true)
	cfg.IdempotencyKey = mcp.KeyConvention{Meta: []string{mcp.MetaACP}}
	d := load(t, cfg)
	refund := toolOf(t, d, "local_refund")
	call := callOf(t, refund.Name, 1, refundArgs)
	var first, second refundRecord
	require.NoError(t, run(t, refund, call, &first))
	require.NoError(t, run(t, refund, call, &second))
	assert.Equal(t, call.Key.String(), first.Key, "the server read the key under ACP's name")
	assert.Contains(t, first.MetaNames, mcp.MetaACP)
	assert.NotContains(t, first.MetaNames, mcp.MetaIdempotencyKey, "only the name configured")
	assert.Equal(t, first, second, "and answered the resend with the first refund")
}
