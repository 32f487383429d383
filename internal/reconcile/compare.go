package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/oncerun/oncerun/internal/idempotency"
	"github.com/oncerun/oncerun/internal/keys"
	"github.com/oncerun/oncerun/internal/untrusted"
)

// Bounds on the provider's text kept in a finding.
const (
	maxKeyBytes        = 1024
	maxProviderIDBytes = 256
	maxCurrencyBytes   = 16
)

// compare compares one source's settled ledger entries with our rows. It
// returns the drift it found and how many keys it compared.
func compare(ctx context.Context, cfg Config, s Source, w window) ([]finding, int, error) {
	entries, err := s.List(ctx, w.since.Add(-w.margin))
	if err != nil {
		return nil, 0, fmt.Errorf("list the provider's %s effects: %w", s.Tool, err)
	}
	// listed holds every key the provider lists, settled or not: a key of
	// ours is over-recorded only if the provider has nothing under it.
	listed := map[string]bool{}
	groups := map[string][]Entry{}
	var order []string
	for _, e := range entries {
		k := entryKey(e)
		listed[k] = true
		if !e.Created.Before(w.cutoff) {
			continue
		}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], e)
	}
	byKey, err := rowsOfKeys(ctx, cfg, order)
	if err != nil {
		return nil, 0, err
	}
	var found []finding
	for _, k := range order {
		if f, drift := compareKey(s, k, groups[k], byKey[k], w); drift {
			found = append(found, f)
		}
	}
	ours, err := idempotency.CompletedKeys(ctx, cfg.Pool, s.Tool, w.since, w.cutoff)
	if err != nil {
		return nil, 0, err
	}
	checked := len(order)
	for _, r := range ours {
		if groups[r.Key] == nil {
			checked++
		}
		if listed[r.Key] {
			continue
		}
		f := finding{
			Kind: KindOverRecorded, Tenant: r.Tenant, Tool: s.Tool, Key: r.Key, RunID: r.RunID, Step: r.Step,
			Ours: r.Result, EffectAt: *r.CompletedAt,
			Detail: "oncerun completed this effect; the provider does not list it",
		}
		if e, err := s.Record(r.Result); err != nil {
			f.Detail += fmt.Sprintf("; oncerun's result cannot be read (%s)", err)
		} else {
			f.Amount, f.Currency, f.ProviderID = -e.Amount, currency(e.Currency), clean(e.ProviderID, maxProviderIDBytes)
		}
		found = append(found, f)
	}
	return found, checked, nil
}

// compareKey compares the provider's effects under key k with our row r
// (nil when we have none).
func compareKey(s Source, k string, g []Entry, r *idempotency.KeyRecord, w window) (finding, bool) {
	theirs, amount, cur, mixed := total(g)
	f := finding{
		Tool: s.Tool, Key: clean(k, maxKeyBytes), Amount: amount, Currency: cur, Theirs: theirs,
		ProviderID: providerIDs(g), EffectAt: g[0].Created,
	}
	if f.EffectAt.IsZero() {
		f.EffectAt = w.cutoff
	}
	parsed, perr := keys.Parse(k)
	if perr == nil {
		f.Tenant, f.RunID, f.Step = parsed.Tenant, parsed.RunID, parsed.Step
	}
	if r == nil || r.State != idempotency.StateCompleted {
		f.Kind = KindUnderRecorded
		switch {
		case g[0].Key == "":
			f.Detail = "the provider holds this effect with no idempotency key; oncerun has no record of it"
		case perr != nil:
			f.Detail = "the provider holds this effect under a key that is not oncerun's; oncerun has no record of it"
		case r == nil:
			f.Detail = "the provider holds this effect; oncerun has no row for its key"
		default:
			f.Detail = fmt.Sprintf("the provider holds this effect; oncerun's key is %s, not completed", r.State)
			f.Ours = r.Failure
		}
		if len(g) > 1 {
			f.Detail += fmt.Sprintf(" (%d effects under this key)", len(g))
		}
		return f, true
	}
	f.Kind, f.Ours = KindAmountMismatch, r.Result
	ours, err := s.Record(r.Result)
	if err != nil {
		f.Detail = fmt.Sprintf("oncerun completed this effect but its result cannot be read (%s); the provider holds %d %s", err, amount, cur)
		return f, true
	}
	ourCur := currency(ours.Currency)
	switch {
	case len(g) > 1 || mixed:
		f.Detail = fmt.Sprintf("the provider holds %d effects under this key, %d %s in all; oncerun made one of %d %s",
			len(g), amount, cur, ours.Amount, ourCur)
		if ourCur == cur {
			f.Amount = amount - ours.Amount
		}
	case ourCur != cur:
		f.Detail = fmt.Sprintf("the provider holds %d %s; oncerun recorded %d %s", amount, cur, ours.Amount, ourCur)
	case ours.Amount != amount:
		f.Detail = fmt.Sprintf("the provider holds %d %s; oncerun recorded %d %s", amount, cur, ours.Amount, ourCur)
		f.Amount = amount - ours.Amount
	default:
		return finding{}, false
	}
	return f, true
}

// entryKey is the key a provider's effect is compared under: its
// idempotency key, or for an effect without one, "provider:" and its id.
func entryKey(e Entry) string {
	if e.Key != "" {
		return e.Key
	}
	return "provider:" + e.ProviderID
}

// total sums the amounts of g in the currency of its first effect; mixed
// tells whether some effect is in another currency. theirs is the
// provider's record, or a JSON array of them.
func total(g []Entry) (theirs json.RawMessage, amount int64, cur string, mixed bool) {
	cur = currency(g[0].Currency)
	raws := make([]json.RawMessage, len(g))
	for i, e := range g {
		raws[i] = jsonValue(e.Raw)
		if currency(e.Currency) != cur {
			mixed = true
			continue
		}
		amount += e.Amount
	}
	if len(g) == 1 {
		return raws[0], amount, cur, mixed
	}
	theirs, _ = json.Marshal(raws)
	return theirs, amount, cur, mixed
}

func providerIDs(g []Entry) string {
	ids := make([]string, 0, len(g))
	for _, e := range g {
		if !slices.Contains(ids, e.ProviderID) {
			ids = append(ids, e.ProviderID)
		}
	}
	return clean(strings.Join(ids, ","), maxProviderIDBytes)
}

// currency is a currency code as findings keep it: lower case.
func currency(s string) string { return clean(strings.ToLower(s), maxCurrencyBytes) }

// clean makes a provider's text storable and safe to show.
func clean(s string, maxBytes int) string { return untrusted.Clean(s, maxBytes) }

// jsonValue is raw when it is JSON, else raw as a JSON string; nil stays
// nil.
func jsonValue(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || json.Valid(raw) {
		return raw
	}
	b, _ := json.Marshal(untrusted.Escape(string(raw)))
	return b
}

// rowsOfKeys reads our rows, in any state, for the keys given; keys that
// are not oncerun's have none.
func rowsOfKeys(ctx context.Context, cfg Config, ks []string) (map[string]*idempotency.KeyRecord, error) {
	var refs []idempotency.KeyRef
	for _, k := range ks {
		if parsed, err := keys.Parse(k); err == nil {
			refs = append(refs, idempotency.KeyRef{Tenant: parsed.Tenant, Key: k})
		}
	}
	list, err := idempotency.KeysOf(ctx, cfg.Pool, refs)
	if err != nil {
		return nil, fmt.Errorf("read the keys the provider lists: %w", err)
	}
	out := make(map[string]*idempotency.KeyRecord, len(list))
	for i := range list {
		out[list[i].Key] = &list[i]
	}
	return out, nil
}
