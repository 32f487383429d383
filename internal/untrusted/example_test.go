package untrusted_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/oncerun/oncerun/internal/untrusted"
)

// Check what enters by its kind; every refusal names the field and what is
// wrong, and matches ErrInvalid.
func ExampleName() {
	for _, runID := range []string{"refund-1001", "..", "refund\u200b1001", "ｒｅｆｕｎｄ", "\u0430cme"} {
		if err := untrusted.Name("run_id", runID, 256); err != nil {
			fmt.Println(errors.Is(err, untrusted.ErrInvalid), err)
			continue
		}
		fmt.Println("ok", runID)
	}
	// Output:
	// ok refund-1001
	// true run_id ".." cannot be used: a URL path cannot carry it
	// true run_id "refund\u200b1001" holds the invisible or format character U+200B at byte 6
	// true run_id "ｒｅｆｕｎｄ" holds characters that look like others (its NFKC form is "refund"); use the plain form
	// true run_id "аcme" mixes the scripts Cyrillic and Latin, as a lookalike of another name would (Cyrillic а for Latin a); write it in one
}

func ExampleText() {
	fmt.Println(untrusted.Text("goal", "refund order 1001\nthe parcel was wet", 16<<10))
	fmt.Println(untrusted.Text("goal", "refund\x00", 16<<10))
	// Output:
	// <nil>
	// goal holds a NUL character (U+0000) at byte 6
}

func ExampleJSON() {
	fmt.Println(untrusted.JSON("arguments", []byte(`{"order_id":"1001","text":"a\u0000b"}`)))
	// Output:
	// arguments holds a NUL character (U+0000) at text (byte 1 of the string)
}

func ExampleDecode() {
	var req struct {
		RunID string `json:"run_id"`
	}
	fmt.Println(untrusted.Decode([]byte(`{"run_id":"a","run_id":"b"}`), &req))
	fmt.Println(untrusted.Decode([]byte(`{"Run_ID":"a"}`), &req))
	// Output:
	// field "run_id" appears twice
	// unknown field "Run_ID"
}

// Print what came from a run through a TerminalWriter: nothing in it can
// move the cursor or reorder the line.
func ExampleTerminalWriter() {
	w := untrusted.NewTerminalWriter(os.Stdout)
	fmt.Fprintf(w, "goal: %s\n", "refund\x1b[2J\u202egnp.exe")
	_ = w.Flush()
	// Output:
	// goal: refund\u001b[2J\u202egnp.exe
}

func ExampleRedact() {
	fmt.Println(untrusted.Redact("postgres://app:s3cret@db:5432/oncerun"))
	fmt.Println(untrusted.Redact("host=db user=app password=s3cret"))
	// Output:
	// postgres://app:xxxxx@db:5432/oncerun
	// host=db user=app password=xxxxx
}
