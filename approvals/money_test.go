package approvals

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFormatMoney(t *testing.T) {
	t.Parallel()
	tests := []struct {
		minor int64
		code  string
		want  string
	}{
		{25900, "EUR", "259.00 EUR"},
		{25900, "eur", "259.00 EUR"},
		{5, "EUR", "0.05 EUR"},
		{-5, "EUR", "-0.05 EUR"},
		{-25950, "USD", "-259.50 USD"},
		{0, "EUR", "0.00 EUR"},
		{123456789, "EUR", "1,234,567.89 EUR"},
		{25900, "JPY", "25,900 JPY"},
		{0, "JPY", "0 JPY"},
		{-7, "JPY", "-7 JPY"},
		{1234, "KWD", "1.234 KWD"},
		{5, "KWD", "0.005 KWD"},
		{-1000, "BHD", "-1.000 BHD"},
		{25900, "XYZ", "25900 XYZ"},
		{25900, "", "25900"},
		{25900, "XXX", "25900 XXX"},
		{25900, "euro", "25900 euro"},
		{math.MinInt64, "EUR", "-92,233,720,368,547,758.08 EUR"},
		{math.MaxInt64, "JPY", "9,223,372,036,854,775,807 JPY"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, formatMoney(tt.minor, tt.code))
		})
	}
}
