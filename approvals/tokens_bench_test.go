package approvals_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/oncerun/oncerun/approvals"
)

// BenchmarkTokensLookup measures a token lookup, which compares the
// presented token's hash with every entry in constant time: its cost grows
// with the number of tokens, found or not.
func BenchmarkTokensLookup(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		var entries []approvals.TokenEntry
		var last string
		for i := range n {
			tok, e, err := approvals.NewToken(approvals.Identity{Name: fmt.Sprintf("u%d", i), Tenant: "acme", Role: approvals.RoleViewer})
			if err != nil {
				b.Fatal(err)
			}
			entries, last = append(entries, e), tok
		}
		raw, err := json.Marshal(entries)
		if err != nil {
			b.Fatal(err)
		}
		tokens, err := approvals.ParseTokens(raw)
		if err != nil {
			b.Fatal(err)
		}
		// An unknown token of the same length, so that only the lookup
		// differs.
		unknown, _, err := approvals.NewToken(approvals.Identity{Name: "x", Tenant: "acme", Role: approvals.RoleViewer})
		if err != nil {
			b.Fatal(err)
		}
		for _, tc := range []struct{ name, token string }{{"found", last}, {"unknown", unknown}} {
			b.Run(fmt.Sprintf("tokens=%d/%s", n, tc.name), func(b *testing.B) {
				for b.Loop() {
					if _, ok := tokens.Lookup(tc.token); ok != (tc.name == "found") {
						b.Fatal("lookup answered wrong")
					}
				}
			})
		}
	}
}
