package payments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error types, as in the "type" field of an error answer.
const (
	TypeAuthentication = "authentication_error"
	TypeInvalidRequest = "invalid_request_error"
	TypeIdempotency    = "idempotency_error"
	TypeAPI            = "api_error"
)

// Error codes, as in the "code" field of an error answer.
const (
	CodeResourceMissing       = "resource_missing"
	CodeAmountTooLarge        = "amount_too_large"
	CodeRequestInProgress     = "request_in_progress"
	CodeUnavailable           = "unavailable"
	CodeCurrencyMismatch      = "currency_mismatch"
	CodeResourceAlreadyExists = "resource_already_exists"
	CodeParameterInvalid      = "parameter_invalid"
	CodeParameterMissing      = "parameter_missing"
	CodeParameterUnknown      = "parameter_unknown"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 1 << 20

// failure is an error answer: an HTTP status and the error object.
type failure struct {
	status int
	body   APIError
}

func (f *failure) Error() string { return f.body.Error() }

// failf builds a failure whose message is formatted from format and args.
func failf(status int, typ, code, param, format string, args ...any) *failure {
	return &failure{status: status, body: APIError{
		Type: typ, Code: code, Param: param, Message: fmt.Sprintf(format, args...),
	}}
}

// badRequest is a 400 invalid_request_error about param.
func badRequest(param, format string, args ...any) *failure {
	return failf(http.StatusBadRequest, TypeInvalidRequest, CodeParameterInvalid, param, format, args...)
}

// missingParam is a 400 invalid_request_error for a required param left out.
func missingParam(param, format string, args ...any) *failure {
	return failf(http.StatusBadRequest, TypeInvalidRequest, CodeParameterMissing, param, format, args...)
}

// unknownParam is a 400 invalid_request_error for a param the API does not
// have.
func unknownParam(param, format string, args ...any) *failure {
	return failf(http.StatusBadRequest, TypeInvalidRequest, CodeParameterUnknown, param, format, args...)
}

// malformed is a 400 invalid_request_error about the request as a whole.
func malformed(format string, args ...any) *failure {
	return failf(http.StatusBadRequest, TypeInvalidRequest, "", "", format, args...)
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError answers with err: a failure as it is, anything else as a 500
// api_error.
func writeError(w http.ResponseWriter, err error) {
	var f *failure
	if !errors.As(err, &f) {
		f = failf(http.StatusInternalServerError, TypeAPI, "", "", "internal error: %s", err)
	}
	writeJSON(w, f.status, map[string]APIError{"error": f.body})
}

// decodeBody decodes the request body into v strictly; see decodeStrict.
func decodeBody(r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err != nil {
		return bodyFailure(err)
	}
	return decodeStrict(data, v)
}

// decodeStrict decodes data into v strictly: valid JSON, one value, no
// fields v does not have. Its failures are 400s that name the problem.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return malformed("request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyFailure(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return malformed("request body must hold a single JSON value")
	}
	return nil
}

// bodyFailure turns a JSON decoding error into a 400 that names the field
// or says what is malformed.
func bodyFailure(err error) *failure {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return badRequest(typeErr.Field, "%s must be %s, got a JSON %s", typeErr.Field, describeKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &typeErr):
		return malformed("request body must be %s, got a JSON %s", describeKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return malformed("request body is not valid JSON: %s (at byte %d)", syntaxErr, syntaxErr.Offset)
	case errors.As(err, &maxErr):
		return malformed("request body is larger than %d bytes", maxErr.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return malformed("request body is not valid JSON: it ends early")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return unknownParam(field, "unknown field %q in request body", field)
	}
	return malformed("request body is not valid: %s", err)
}

func describeKind(kind string) string {
	switch kind {
	case "int64", "int":
		return "an integer"
	case "string":
		return "a string"
	case "struct", "map":
		return "a JSON object"
	case "slice":
		return "a JSON array"
	}
	return "a " + kind
}
