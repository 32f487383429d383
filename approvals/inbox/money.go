package inbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/oncerun/oncerun/internal/money"
	"github.com/oncerun/oncerun/tools"
)

// parseAmount reads an amount written with at most scale decimals
// ("150", "150.5", "150.50", "-3.25"; no thousands separators) as minor
// units: "150.50" with scale 2 is 15050.
func parseAmount(s string, scale int) (int64, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	whole, frac, dotted := strings.Cut(body, ".")
	switch {
	case s == "":
		return 0, errors.New("no amount")
	case strings.ContainsAny(body, ", '_"):
		return 0, fmt.Errorf("%q: write the amount with digits and a decimal point only, without thousands separators", s)
	case whole == "" || !allDigits(whole) || !allDigits(frac) || (dotted && frac == ""):
		return 0, fmt.Errorf("%q is not an amount such as 150.00", s)
	case len(frac) > scale:
		return 0, fmt.Errorf("%q has %d decimals; the currency has %d", s, len(frac), scale)
	}
	digits := whole + frac + strings.Repeat("0", scale-len(frac))
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if neg {
		n = -n
	}
	return n, nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// moneyValues finds the tool's amounts in obj, the top-level fields of a
// call's arguments or of a result: it maps each amount field whose value
// is an integer to that amount written as money (money.Format), with the
// currency obj holds for it. A field without an integer value is left out.
func moneyValues(t tools.Tool, obj map[string]json.RawMessage) map[string]string {
	var out map[string]string
	for _, a := range t.Amounts {
		minor, code, ok := money.Field(obj, a.Field, a.Currency)
		if !ok {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[a.Field] = money.Format(minor, code)
	}
	return out
}
