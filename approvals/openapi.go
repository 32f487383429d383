package approvals

import (
	_ "embed"
	"net/http"
)

// OpenAPIDocument is the OpenAPI 3.1 description of the API under /v1,
// served at GET /v1/openapi.json. Clients are generated from it, and the
// package's tests check every handler's answers against it.
//
//go:embed openapi.json
var OpenAPIDocument []byte

// openAPIDocument answers GET /v1/openapi.json with the document. It takes
// no token: the document describes the API, not a tenant's runs.
func (s *Server) openAPIDocument(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(OpenAPIDocument)
}
