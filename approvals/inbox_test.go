package approvals

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestArgRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		want []argRow
	}{
		{
			name: "object keys sorted, strings as text, the rest as compact JSON",
			raw: `{
				"zone": "eu-west-1",
				"amount": 1250,
				"ratio": 1.50,
				"dry_run": true,
				"order": {"id" : "o-1",  "lines": [1, 2]},
				"note": "say \"hi\"\n",
				"empty": ""
			}`,
			want: []argRow{
				{Name: "amount", Value: "1250"},
				{Name: "dry_run", Value: "true"},
				{Name: "empty", Value: ""},
				{Name: "note", Value: "say \"hi\"\n"},
				{Name: "order", Value: `{"id":"o-1","lines":[1,2]}`},
				{Name: "ratio", Value: "1.50"},
				{Name: "zone", Value: "eu-west-1"},
			},
		},
		{
			name: "keys sorted bytewise",
			raw:  `{"b":"2","B":"1","a":"3"}`,
			want: []argRow{{Name: "B", Value: "1"}, {Name: "a", Value: "3"}, {Name: "b", Value: "2"}},
		},
		{
			name: "empty object has no rows",
			raw:  `{}`,
			want: []argRow{},
		},
		{
			name: "array is one row",
			raw:  `[1,2]`,
			want: []argRow{{Name: "(arguments)", Value: `[1,2]`}},
		},
		{
			name: "string is one row, shown as written",
			raw:  `"restart everything"`,
			want: []argRow{{Name: "(arguments)", Value: `"restart everything"`}},
		},
		{
			name: "number is one row",
			raw:  `42`,
			want: []argRow{{Name: "(arguments)", Value: `42`}},
		},
		{
			name: "a null argument shows as null, not as an empty string",
			raw:  `{"a":null,"b":""}`,
			want: []argRow{{Name: "a", Value: "null"}, {Name: "b", Value: ""}},
		},
		{
			name: "null arguments are one row",
			raw:  `null`,
			want: []argRow{{Name: "(arguments)", Value: `null`}},
		},
		{
			name: "not JSON is one row with the raw text",
			raw:  `{not json`,
			want: []argRow{{Name: "(arguments)", Value: `{not json`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, argRows(json.RawMessage(tt.raw)))
		})
	}
}
