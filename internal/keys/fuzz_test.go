package keys

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzKeyRoundTrip checks that every valid key parses back to itself.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("acme", "r1", int64(1), "issue_credit")
	f.Add("acme", "a/b", int64(2), "t")
	f.Add("a%2F", "%", int64(9), "t/x")
	f.Add("é", "run 1?x=y#z", int64(1<<40), "add_order_note")
	f.Fuzz(func(t *testing.T, tenant, runID string, step int64, tool string) {
		k, err := New(tenant, runID, step, tool)
		if err != nil {
			return
		}
		back, err := Parse(k.String())
		if err != nil {
			t.Fatalf("Parse(%q): %v", k.String(), err)
		}
		if back != k {
			t.Fatalf("round trip of %#v gave %#v", k, back)
		}
	})
}

// FuzzKeyCollision checks that two distinct valid tuples never share a key
// string. Shifting characters across the separators is the case escaping
// exists for, so the seeds are built that way.
func FuzzKeyCollision(f *testing.F) {
	f.Add("acme", "a/1/t", int64(1), "t", "acme/a", "1", int64(1), "t")
	f.Add("a", "b%2Fc", int64(1), "t", "a", "b/c", int64(1), "t")
	f.Add("a", "b", int64(12), "t", "a", "b/1", int64(2), "t")
	f.Fuzz(func(t *testing.T, t1, r1 string, s1 int64, o1, t2, r2 string, s2 int64, o2 string) {
		a, errA := New(t1, r1, s1, o1)
		b, errB := New(t2, r2, s2, o2)
		if errA != nil || errB != nil || a == b {
			return
		}
		if a.String() == b.String() {
			t.Fatalf("%#v and %#v share key %q", a, b, a.String())
		}
	})
}

// FuzzCanonicalize checks that canonical forms are fixed points, that they
// keep the document's meaning, and that re-encoding a document (another
// member order and spelling) does not change its hash.
func FuzzCanonicalize(f *testing.F) {
	f.Add([]byte(`{"b":1,"a":[1.0,"\u00e9",null,true]}`))
	f.Add([]byte(`{"order_id":"o-1","amount_cents":1500,"reason":"late","currency":"EUR"}`))
	f.Add([]byte(`[1e21,1e-7,-0,0.1,"\ud83d\ude00"]`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Canonicalize(raw)
		if err != nil {
			return
		}
		again, err := Canonicalize(c)
		if err != nil {
			t.Fatalf("canonical form %s is refused: %v", c, err)
		}
		if !bytes.Equal(c, again) {
			t.Fatalf("not a fixed point: %s became %s", c, again)
		}
		var orig, canon any
		if err := json.Unmarshal(raw, &orig); err != nil {
			t.Fatalf("accepted input is not JSON: %v", err)
		}
		if err := json.Unmarshal(c, &canon); err != nil {
			t.Fatalf("canonical form is not JSON: %v", err)
		}
		// Re-encode with encoding/json's own escaping and indentation, a
		// different spelling of the same document, and compare hashes.
		respelled, err := json.MarshalIndent(orig, "", "  ")
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		h1, err1 := ArgsHash(raw)
		h2, err2 := ArgsHash(respelled)
		if err1 != nil || err2 != nil {
			t.Fatalf("hash: %v, %v", err1, err2)
		}
		if h1 != h2 {
			t.Fatalf("%s and its re-encoding %s hash differently", raw, respelled)
		}
	})
}
