// Package httpservertest checks, from a test, that a running server has
// the limits of internal/httpserver.
package httpservertest
