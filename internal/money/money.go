// Package money knows the currencies oncerun counts (ISO 4217 list one,
// shipped as a table) and writes amounts in minor units as money, by
// their currency's minor unit.
package money

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Scale is the number of decimals of a currency's minor unit (EUR 2,
// JPY 0, KWD 3) and its code in upper case; ok is false for a code that
// is not a currency of the table (see [Lookup]).
func Scale(code string) (scale int, unit string, ok bool) {
	c, ok := Lookup(code)
	if !ok {
		return 0, "", false
	}
	return c.Minor, c.Code, true
}

// Format writes minor units of the currency code as money: 25900 EUR
// is "259.00 EUR", 25900 JPY "25,900 JPY", 1234 KWD "1.234 KWD". An
// unknown currency shows the integer as it is, with the code as given.
func Format(minor int64, code string) string {
	scale, unit, ok := Scale(code)
	if !ok {
		return strings.TrimSpace(strconv.FormatInt(minor, 10) + " " + code)
	}
	return Decimal(minor, scale, true) + " " + unit
}

// Decimal writes minor units with scale decimals; grouped puts a comma
// between thousands of the whole part. math.MinInt64 is written right.
func Decimal(minor int64, scale int, grouped bool) string {
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

// Field reads the amount named field of obj, the top-level fields of a
// call's arguments or of a result: its integer value in minor units and the
// currency code held by currencyField ("" when the tool names none or obj
// lacks it). ok is false when field is absent or not an integer.
func Field(obj map[string]json.RawMessage, field, currencyField string) (minor int64, code string, ok bool) {
	raw, found := obj[field]
	if !found {
		return 0, "", false
	}
	minor, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, "", false
	}
	if currencyField != "" {
		_ = json.Unmarshal(obj[currencyField], &code)
	}
	return minor, code, true
}
