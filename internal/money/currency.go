package money

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// iso4217 is ISO 4217 list one as oncerun ships it: code, number and
// minor units of every currency and fund whose minor units the standard
// gives as a number.
//
//go:embed iso4217.csv
var iso4217 string

// Currency is one entry of the table.
type Currency struct {
	// Code is the three upper-case letters (EUR).
	Code string
	// Number is the standard's numeric code (978).
	Number int
	// Minor is the number of decimals of its minor unit (EUR 2, JPY 0,
	// KWD 3, CLF 4).
	Minor int
}

// table holds the currencies by code.
var table = mustParse(iso4217)

func mustParse(text string) map[string]Currency {
	out := map[string]Currency{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := parseEntry(line)
		if err != nil {
			panic(fmt.Sprintf("iso4217.csv line %d: %v", i+1, err))
		}
		if _, dup := out[c.Code]; dup {
			panic(fmt.Sprintf("iso4217.csv line %d: %s twice", i+1, c.Code))
		}
		out[c.Code] = c
	}
	return out
}

func parseEntry(line string) (Currency, error) {
	f := strings.Split(line, ",")
	if len(f) != 3 {
		return Currency{}, fmt.Errorf("%q: want code,number,minor units", line)
	}
	if !letters(f[0]) || strings.ToUpper(f[0]) != f[0] {
		return Currency{}, fmt.Errorf("code %q is not three upper-case letters", f[0])
	}
	number, err := strconv.Atoi(f[1])
	if err != nil || len(f[1]) != 3 {
		return Currency{}, fmt.Errorf("number %q of %s is not three digits", f[1], f[0])
	}
	minor, err := strconv.Atoi(f[2])
	if err != nil || minor < 0 || minor > 4 {
		return Currency{}, fmt.Errorf("minor units %q of %s are not 0 to 4", f[2], f[0])
	}
	return Currency{Code: f[0], Number: number, Minor: minor}, nil
}

// letters reports whether s is three ASCII letters.
func letters(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		c := s[i] | 0x20 // lower case
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// Lookup returns the currency whose code is code, in one canonical form:
// three ASCII letters, in either case, and nothing else ("eur" is EUR;
// " EUR", "978", "€", "EURO" and "" are no currency). ISO 4217's
// entries without minor units (XXX, XTS, XAU, XDR, …) are no currency
// either: nothing can count an amount in them.
func Lookup(code string) (Currency, bool) {
	if !letters(code) {
		return Currency{}, false
	}
	c, ok := table[strings.ToUpper(code)]
	return c, ok
}

// Codes returns the table's codes, in no order.
func Codes() []string {
	out := make([]string, 0, len(table))
	for code := range table {
		out = append(out, code)
	}
	return out
}
