package money_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncerun/oncerun/internal/money"
)

func TestACurrencyIsThreeLettersOfTheTableInOneCanonicalForm(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"EUR", "eur", "Eur"} {
		c, ok := money.Lookup(code)
		require.True(t, ok, code)
		assert.Equal(t, money.Currency{Code: "EUR", Number: 978, Minor: 2}, c, code)
	}
	for _, code := range []string{"978", "€", "EURO", "EU", "", " EUR", "EUR ", "E\x00R", "ZZZ",
		"XXX", "XTS", "XAU", "XDR", "ANG", "HRK", "ＥＵＲ"} {
		_, ok := money.Lookup(code)
		assert.False(t, ok, "%q is no currency an amount can count in", code)
	}
	for code, minor := range map[string]int{"JPY": 0, "KWD": 3, "CLF": 4, "IQD": 3, "ISK": 0, "XCG": 2, "ZWG": 2, "USD": 2} {
		c, ok := money.Lookup(code)
		require.True(t, ok, code)
		assert.Equal(t, minor, c.Minor, code)
	}
}

func TestTheTableHasOneEntryPerCodeAndNumber(t *testing.T) {
	t.Parallel()
	codes := money.Codes()
	require.Greater(t, len(codes), 150)
	numbers := map[int]string{}
	for _, code := range codes {
		c, ok := money.Lookup(code)
		require.True(t, ok, code)
		if other, dup := numbers[c.Number]; dup {
			t.Errorf("%s and %s share the number %03d", code, other, c.Number)
		}
		numbers[c.Number] = code
	}
}

func TestFormatWritesMinorUnitsByTheTable(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "259.00 EUR", money.Format(25900, "eur"))
	assert.Equal(t, "25,900 JPY", money.Format(25900, "JPY"))
	assert.Equal(t, "1.234 KWD", money.Format(1234, "KWD"))
	assert.Equal(t, "1.234 IQD", money.Format(1234, "IQD"), "ISO 4217's minor units, not a display rounding")
	assert.Equal(t, "12 XXX", money.Format(12, "XXX"), "no currency: the integer as it is")
}
