// Package doccheck holds the tests that keep the README and docs/ true to
// the code: every Go snippet they show is quoted from a file the compiler
// builds (an example test, or a file under examples/), so a snippet cannot
// drift from the API it shows.
package doccheck
