package approvals

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/text/currency"

	"github.com/oncerun/oncerun/tools"
)

// currencyScale is the number of decimals of an ISO 4217 currency's
// standard rounding (EUR 2, JPY 0, KWD 3) and its code in upper case; ok
// is false for a code that is not a known currency. ISO 4217's "XXX" (no
// currency) and "XTS" (testing) are not money either.
func currencyScale(code string) (scale int, unit string, ok bool) {
	u, err := currency.ParseISO(strings.TrimSpace(code))
	if err != nil {
		return 0, "", false
	}
	unit = u.String()
	if unit == "XXX" || unit == "XTS" {
		return 0, "", false
	}
	scale, _ = currency.Standard.Rounding(u)
	return scale, unit, true
}

// formatMoney writes minor units of the currency code as money: 25900 EUR
// is "259.00 EUR", 25900 JPY "25,900 JPY", 1234 KWD "1.234 KWD". An
// unknown currency shows the integer as it is, with the code as given.
func formatMoney(minor int64, code string) string {
	scale, unit, ok := currencyScale(code)
	if !ok {
		return strings.TrimSpace(strconv.FormatInt(minor, 10) + " " + code)
	}
	return decimal(minor, scale, true) + " " + unit
}

// decimal writes minor units with scale decimals; grouped puts a comma
// between thousands of the whole part. math.MinInt64 is written right.
func decimal(minor int64, scale int, grouped bool) string {
	sign := ""
	mag := uint64(minor)
	if minor < 0 {
		sign, mag = "-", -mag
	}
	digits := strconv.FormatUint(mag, 10)
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-scale], digits[len(digits)-scale:]
	if grouped {
		whole = group(whole)
	}
	if scale == 0 {
		return sign + whole
	}
	return sign + whole + "." + frac
}

// group puts a comma between each three digits of whole, from the right.
func group(whole string) string {
	if len(whole) <= 3 {
		return whole
	}
	var b strings.Builder
	head := len(whole) % 3
	if head > 0 {
		b.WriteString(whole[:head])
	}
	for i := head; i < len(whole); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(whole[i : i+3])
	}
	return b.String()
}

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
// is an integer to that amount written as money (formatMoney), with the
// currency obj holds for it. A field without an integer value is left out.
func moneyValues(t tools.Tool, obj map[string]json.RawMessage) map[string]string {
	var out map[string]string
	for _, a := range t.Amounts {
		raw, ok := obj[a.Field]
		if !ok {
			continue
		}
		minor, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			continue
		}
		var code string
		if a.Currency != "" {
			_ = json.Unmarshal(obj[a.Currency], &code)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[a.Field] = formatMoney(minor, code)
	}
	return out
}
