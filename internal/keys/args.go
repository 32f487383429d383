package keys

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxArgsSize is the largest arguments document, in bytes, that
// [Canonicalize] and [ArgsHash] accept.
const MaxArgsSize = 1 << 20

// maxSafeInt is 2⁵³−1, the largest magnitude up to which every integer has
// its own IEEE 754 double (ECMAScript's Number.MAX_SAFE_INTEGER).
const maxSafeInt = 1<<53 - 1

// ErrInvalidArgs is returned, wrapped, for arguments that are not a JSON
// document with a single canonical form.
var ErrInvalidArgs = errors.New("invalid tool arguments")

// Canonicalize returns the RFC 8785 canonical form of the JSON document raw:
// members sorted by their UTF-16 code units, no insignificant whitespace,
// numbers in the ECMAScript shortest form and strings with minimal escaping.
func Canonicalize(raw []byte) ([]byte, error) {
	if len(raw) > MaxArgsSize {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidArgs, len(raw), MaxArgsSize)
	}
	large, err := checkNumbers(raw)
	if err != nil {
		return nil, err
	}
	v := jsontext.Value(bytes.Clone(raw))
	if err := v.Canonicalize(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgs, err)
	}
	if large {
		// Beyond 2⁵³ the shortest form of a double may be an integer that is
		// not its value: 100000000000000096 (exact) and 100000000000000100.0
		// are both the double written 100000000000000100. That form would be
		// refused when read back, and an integer would not keep its digits.
		if _, err := checkNumbers(v); err != nil {
			return nil, fmt.Errorf("%w: a number's canonical form is an integer other than its value (%s)",
				ErrInvalidArgs, strings.TrimPrefix(err.Error(), ErrInvalidArgs.Error()+": "))
		}
	}
	return v, nil
}

// ArgsHash returns the lower-case hex SHA-256 of the canonical form of raw.
func ArgsHash(raw []byte) (string, error) {
	c, err := Canonicalize(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// checkNumbers refuses numbers that RFC 8785 cannot represent faithfully.
// The canonicalizer itself would clamp 1e400 to the largest double and round
// the integer 9007199254740993 to 9007199254740992, so two different argument
// documents would share a hash. Integer literals must therefore be exact
// doubles; numbers written with a fraction or an exponent follow RFC 8785's
// double semantics, where decimals that round to the same double are equal.
// The decoder also reports the syntax errors, duplicate names and invalid
// UTF-8 that Canonicalize refuses. large reports a number beyond 2⁵³, whose
// canonical form Canonicalize checks again.
func checkNumbers(raw []byte) (large bool, err error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return large, nil
		}
		if err != nil {
			return large, fmt.Errorf("%w: %w", ErrInvalidArgs, err)
		}
		if tok.Kind() != '0' {
			continue
		}
		lit := tok.String()
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil || math.IsInf(f, 0) {
			return large, fmt.Errorf("%w: number %s is outside the range of a double", ErrInvalidArgs, lit)
		}
		if math.Abs(f) <= maxSafeInt {
			continue
		}
		large = true
		if isIntegerLiteral(lit) && !exactInteger(lit, f) {
			return large, fmt.Errorf("%w: integer %s has no exact double and would hash like its neighbours; send it as a string", ErrInvalidArgs, lit)
		}
	}
}

func isIntegerLiteral(lit string) bool {
	return !strings.ContainsAny(lit, ".eE")
}

// exactInteger reports whether the integer literal lit is exactly the double f.
func exactInteger(lit string, f float64) bool {
	want, ok := new(big.Int).SetString(lit, 10)
	if !ok {
		return false
	}
	got, _ := big.NewFloat(f).Int(nil)
	return want.Cmp(got) == 0
}
