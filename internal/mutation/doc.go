// Command mutation checks that the tests guard the promises oncerun makes.
// It builds named bugs into the tests one at a time, each a small change to
// the code that keeps one promise (the claim's conflict handling, the
// arguments-hash comparison, the lease, the watchdog's alert, an approval's
// binding to its arguments...), runs the tests that should notice, and
// reports which test did. A bug no test notices is a promise nothing guards.
//
//	go run ./internal/mutation                 every mutation (make mutation)
//	go run ./internal/mutation -list           the table, without running it
//	go run ./internal/mutation -only args-hash,random-key
//	go run ./internal/mutation -json           a machine-readable report
//	go run ./internal/mutation -discover -only lease-expiry
//	                                           every test of the packages, to find all that catch it
//
// # Protocol
//
// The source tree is never written: each mutated file is written to a
// temporary directory, and go test compiles it in the original's place
// (go test -overlay). So make mutation is safe to run while someone edits
// or builds in the same tree: no other build sees a mutation. For each
// mutation, in the order of the table:
//
//  1. The file is read and each snippet the mutation replaces must occur in
//     it exactly once; otherwise the mutation no longer applies (the code
//     moved on) and that is a failure, so that the table cannot go stale
//     quietly.
//  2. The mutated bytes are written to a new temporary directory, with an
//     overlay file, {"Replace": {"/abs/path/of/the/file.go": "/tmp/.../file.go"}}.
//  3. go test -overlay runs the mutation's tests (-count=1, without -race,
//     -vet=off, with a timeout) in their own process group. GOFLAGS carries
//     the -overlay too, so that a test that builds a binary of the module
//     with go build builds the mutation into it.
//  4. The temporary directory is removed.
//
// The overlaid bytes are part of the key under which the go command
// caches a build, so the mutated package, and every test binary that
// links it, is built anew for each mutation; the other packages come from
// the cache, and the cached builds of the unchanged source stay valid.
// The overlay changes what is compiled or embedded, not the disk: a test
// that reads the mutated file while it runs reads the original.
//
// A mutation is caught when a named test fails ("--- FAIL: TestName"), or
// times out. It SURVIVED when every test passed. It is broken when the
// mutated code does not build (a compiler is not a test) or the tests
// failed without naming one. Before the first mutation, the same tests run
// once on the unchanged source, so that a test that fails anyway cannot
// pass for a catch. The command exits 1 if any mutation survived, is broken
// or no longer applies.
//
// # Interruptions
//
// Ctrl-C, SIGTERM and SIGHUP stop the running tests (their whole process
// group, test binaries included), and the command reports what it ran and
// exits 130; a second signal ends it at once. Nothing in the source tree
// needs putting back, whatever ends the command, SIGKILL included: at
// worst a mutation-* directory is left in the temporary directory.
package main
