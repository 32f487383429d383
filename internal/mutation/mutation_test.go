package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the module's root, two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return r
}

// A refactor that moves a mutation's snippet makes the table stale: make
// test says so before make mutation has to.
func TestEveryMutationStillApplies(t *testing.T) {
	t.Parallel()
	for i, m := range mutations {
		t.Run(m.Name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(root(t), filepath.FromSlash(m.File)))
			require.NoError(t, err, "mutation %d", i+1)
			out, err := m.mutate(src)
			require.NoError(t, err, "mutation %d: fix its snippet in mutations.go", i+1)
			assert.NotEqual(t, string(src), string(out))
		})
	}
}

// Every test a mutation names exists in one of its packages, so that -run
// cannot quietly match nothing.
func TestEveryCatchingTestIsDefined(t *testing.T) {
	t.Parallel()
	for _, m := range mutations {
		t.Run(m.Name, func(t *testing.T) {
			require.NotEmpty(t, m.Packages)
			require.NotEmpty(t, m.Tests)
			var sources []byte
			for _, p := range m.Packages {
				files, err := filepath.Glob(filepath.Join(root(t), filepath.FromSlash(p), "*_test.go"))
				require.NoError(t, err)
				require.NotEmpty(t, files, "package %s has no test files", p)
				for _, f := range files {
					b, err := os.ReadFile(f)
					require.NoError(t, err)
					sources = append(sources, b...)
				}
			}
			for _, name := range m.Tests {
				def := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(`)
				assert.True(t, def.Match(sources), "no func %s( in the tests of %s", name, strings.Join(m.Packages, ", "))
			}
		})
	}
}

func TestMutationsAreNamedOnceAndDescribed(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, m := range mutations {
		assert.Regexp(t, `^[a-z][a-z0-9-]*$`, m.Name, "a name -only can take")
		assert.False(t, seen[m.Name], "%s is named twice", m.Name)
		seen[m.Name] = true
		assert.NotEmpty(t, m.Bug, m.Name)
		assert.NotEqual(t, m.Old, m.New, m.Name)
	}
}

// An edit of the mutated code, or a second copy of the snippet, makes a
// mutation no longer apply, never apply somewhere else.
func TestAnEditedSnippetNoLongerApplies(t *testing.T) {
	t.Parallel()
	for _, m := range mutations {
		t.Run(m.Name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(root(t), filepath.FromSlash(m.File)))
			require.NoError(t, err)
			edited := bytes.Replace(src, []byte(m.Old), []byte(m.Old[:len(m.Old)-1]+"\u00a7"), 1)
			_, err = m.mutate(edited)
			require.ErrorIs(t, err, errStale)
			assert.Contains(t, err.Error(), "no longer applies: "+m.File+" changed")

			twice := append(append([]byte{}, src...), m.Old...)
			_, err = m.mutate(twice)
			require.ErrorIs(t, err, errStale)
		})
	}
}

func TestAMutationNeedingAnImportAddsIt(t *testing.T) {
	t.Parallel()
	m := Mutation{Name: "n", File: "a.go", Old: "return 1", New: "return rand.IntN(2)", Import: "math/rand/v2"}
	src := "package a\n\nimport (\n\t\"fmt\"\n)\n\nfunc f() int { fmt.Println(); return 1 }\n"

	out, err := m.mutate([]byte(src))

	require.NoError(t, err)
	assert.Equal(t, "package a\n\nimport (\n\t\"math/rand/v2\"\n\t\"fmt\"\n)\n\nfunc f() int { fmt.Println(); return rand.IntN(2) }\n", string(out))
	_, err = m.mutate(out)
	require.ErrorIs(t, err, errStale, "a file that imports it already")
}

// tempFile writes src to a file of its own and returns its directory and
// a mutation of it.
func tempFile(t *testing.T, src string, m Mutation) (dir string, _ Mutation) {
	t.Helper()
	dir = t.TempDir()
	m.File = "a.go"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte(src), 0o640))
	return dir, m
}

// snapshot is what the source directory holds: each file's path, mode,
// modification time and bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = st.Mode().String() + " " + st.ModTime().String() + "\n" + string(b)
		return err
	})
	require.NoError(t, err)
	return out
}

// The mutated bytes go to a temporary directory, which the overlay file
// names in the original's place; the source is only read.
func TestAnOverlayLeavesTheSourceAlone(t *testing.T) {
	t.Parallel()
	const src = "package a\n\nfunc f() int { return 1 }\n"
	dir, m := tempFile(t, src, Mutation{Name: "n", Old: "return 1", New: "return 2"})
	before := snapshot(t, dir)

	ov, err := writeOverlay(dir, m)

	require.NoError(t, err)
	assert.Equal(t, before, snapshot(t, dir), "the source directory is as it was")
	assert.False(t, strings.HasPrefix(ov.Dir, dir+string(filepath.Separator)))
	b, err := os.ReadFile(ov.File)
	require.NoError(t, err)
	var spec overlayFile
	require.NoError(t, json.Unmarshal(b, &spec), string(b))
	assert.Equal(t, map[string]string{filepath.Join(dir, "a.go"): ov.Mutated}, spec.Replace)
	b, err = os.ReadFile(ov.Mutated)
	require.NoError(t, err)
	assert.Equal(t, "package a\n\nfunc f() int { return 2 }\n", string(b))

	require.NoError(t, ov.remove())
	_, err = os.Stat(ov.Dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the temporary directory is removed")
	assert.Equal(t, before, snapshot(t, dir))
}

func TestAnOverlayIsAddedToGOFLAGS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, base, want string }{
		{"/tmp/m/overlay.json", "", "-overlay=/tmp/m/overlay.json"},
		{"/tmp/m/overlay.json", "-buildvcs=false", "-buildvcs=false -overlay=/tmp/m/overlay.json"},
		{"/tmp/a b/overlay.json", "-mod=mod", "-mod=mod '-overlay=/tmp/a b/overlay.json'"},
		{"/tmp/a' b/overlay.json", "", `"-overlay=/tmp/a' b/overlay.json"`},
	} {
		got, err := overlay{File: tc.file}.goFlags(tc.base)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	_, err := overlay{File: `/tmp/a' "b/overlay.json`}.goFlags("")
	assert.Error(t, err)
}

func TestGoTestOutputIsJudged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		out      string
		passed   bool
		want     string
		caughtBy []string
	}{
		{"a test fails", "--- FAIL: TestA (0.01s)\n    --- FAIL: TestA/sub (0.00s)\n        a_test.go:9: boom\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\texample.com/m\t0.1s\nFAIL\n",
			false, resultCaught, []string{"TestA", "TestB"}},
		{"a test times out", "panic: test timed out after 1m0s\n\trunning tests:\n\t\tTestSlow (1m0s)\n\ngoroutine 1 [running]:\nFAIL\texample.com/m\t60.1s\nFAIL\n",
			false, resultCaught, []string{"TestSlow"}},
		{"every test passes", "ok  \texample.com/m\t0.2s\n", true, resultSurvived, nil},
		{"the mutated code does not build", "# example.com/m\n./a.go:3:9: undefined: rand\nFAIL\texample.com/m [build failed]\nFAIL\n",
			false, resultBroken, nil},
		{"a test binary cannot start", "FAIL\texample.com/m [setup failed]\n", false, resultBroken, nil},
		{"no test matches", "ok  \texample.com/m\t0.1s [no tests to run]\n", true, resultBroken, nil},
		{"a failure names no test", "panic: in TestMain\nFAIL\texample.com/m\t0.1s\n", false, resultBroken, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res Result
			judge(&res, testRun{Output: []byte(tc.out), Passed: tc.passed}, false)
			assert.Equal(t, tc.want, res.Result)
			assert.Equal(t, tc.caughtBy, res.CaughtBy)
			if tc.want == resultBroken {
				assert.NotEmpty(t, res.Detail)
			}
		})
	}
}

func TestGoTestArgsNameTheOverlay(t *testing.T) {
	t.Parallel()
	assert.Equal(t, []string{"test", "-count=1", "-vet=off", "-timeout", "1m0s", "-overlay", "/tmp/m/overlay.json", "-run", "^(TestA)$", "./a", "./b"},
		goTestArgs([]string{"./a", "./b"}, []string{"TestA"}, time.Minute, "/tmp/m/overlay.json"))
	assert.Equal(t, []string{"test", "-count=1", "-vet=off", "-timeout", "1m0s", "./a"},
		goTestArgs([]string{"./a"}, nil, time.Minute, ""), "the unchanged source, every test")
}

func TestRunRegexpMatchesExactlyTheNamedTests(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(runRegexp([]string{"TestA", "TestB"}))
	assert.True(t, re.MatchString("TestA"))
	assert.True(t, re.MatchString("TestB"))
	assert.False(t, re.MatchString("TestAB"))
	assert.False(t, re.MatchString("XTestA"))
	assert.Empty(t, runRegexp(nil))
}

func TestOnlyChoosesByNameOrNumber(t *testing.T) {
	t.Parallel()
	table := []Mutation{{Name: "a"}, {Name: "a-b"}, {Name: "c"}}
	names := func(ns []numbered) []string {
		var out []string
		for _, n := range ns {
			out = append(out, strconv.Itoa(n.N)+n.Name)
		}
		return out
	}
	got, err := choose(table, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"1a", "2a-b", "3c"}, names(got))
	got, err = choose(table, "c, a")
	require.NoError(t, err)
	assert.Equal(t, []string{"1a", "3c"}, names(got), "table order, and a does not choose a-b")
	got, err = choose(table, "2")
	require.NoError(t, err)
	assert.Equal(t, []string{"2a-b"}, names(got))
	_, err = choose(table, "a,zz,4")
	assert.ErrorContains(t, err, "no mutation 4, zz")
}

// A mutation whose snippet, or file, is gone fails loudly.
func TestAMutationThatNoLongerAppliesFails(t *testing.T) {
	t.Parallel()
	const src = "package a\n\nfunc f() int { return 1 }\n"
	dir, m := tempFile(t, src, Mutation{Name: "n", Old: "return 7", New: "return 2", Packages: []string{"./"}, Tests: []string{"TestF"}})
	r := runner{root: dir, o: options{timeout: time.Minute}, log: &bytes.Buffer{}}

	res := r.runOne(context.Background(), numbered{N: 4, Mutation: m})

	assert.Equal(t, resultStale, res.Result)
	assert.Equal(t, `a.go changed (the snippet "return 7" occurs 0 times, not once)`, res.Detail)
	var report bytes.Buffer
	require.NoError(t, printReport(&report, []Result{res}, false))
	assert.Contains(t, report.String(), "mutation 4 (n) no longer applies: a.go changed")

	m.File = "b.go"
	res = r.runOne(context.Background(), numbered{N: 4, Mutation: m})
	assert.Equal(t, resultStale, res.Result)
	assert.Equal(t, "b.go changed: it is gone", res.Detail)
}

// tempModule writes files (name: source) to a module of their own,
// example.com/m, and returns its directory.
func tempModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.21\n"
	for name, src := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	}
	return dir
}

// The tests run on the mutated code, their own go build included, while
// the source stays as it was, and the temporary directory goes.
func TestAMutationIsCaughtThroughTheOverlay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a test binary")
	}
	t.Parallel()
	dir := tempModule(t, map[string]string{
		"m.go": "package m\n\nfunc One() int { return 1 }\n",
		"m_test.go": `package m

import (
	"os/exec"
	"testing"
)

func TestOne(t *testing.T) {
	if One() != 1 {
		t.Fatal(One())
	}
}

func TestBuiltBinary(t *testing.T) {
	out, err := exec.Command("go", "run", "./one").CombinedOutput()
	if err != nil || string(out) != "1\n" {
		t.Fatalf("%s %v", out, err)
	}
}
`,
		"one/main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/m\"\n)\n\nfunc main() { fmt.Println(m.One()) }\n",
	})
	name := "two-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	m := Mutation{Name: name, File: "m.go", Old: "return 1", New: "return 2", Packages: []string{"./"}, Tests: []string{"TestOne", "TestBuiltBinary"}}
	r, err := newRunner(context.Background(), dir, options{timeout: 2 * time.Minute}, &bytes.Buffer{})
	require.NoError(t, err)
	before := snapshot(t, dir)

	res := r.runOne(context.Background(), numbered{N: 1, Mutation: m})

	assert.Equal(t, resultCaught, res.Result, res.Detail)
	assert.ElementsMatch(t, []string{"TestOne", "TestBuiltBinary"}, res.CaughtBy, "go run in a test builds the mutation too")
	assert.Equal(t, before, snapshot(t, dir), "the source is as it was")
	left, err := filepath.Glob(filepath.Join(os.TempDir(), "mutation-"+name+"-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "the temporary directory is removed")
}

// A run stopped while its tests run (what a signal does) kills the whole
// process group, test binaries included.
func TestAnInterruptedRunKillsItsTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a test binary")
	}
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	dir := tempModule(t, map[string]string{
		"m.go": "package m\n\nfunc One() int { return 1 }\n",
		"m_test.go": `package m

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func TestWaits(t *testing.T) {
	_ = os.WriteFile(` + strconv.Quote(pidFile) + `, []byte(strconv.Itoa(os.Getpid())), 0o644)
	time.Sleep(time.Minute)
}
`,
	})
	m := Mutation{Name: "two", File: "m.go", Old: "return 1", New: "return 2", Packages: []string{"./"}, Tests: []string{"TestWaits"}}
	r := runner{root: dir, o: options{timeout: 2 * time.Minute}, log: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid := make(chan int, 1)
	go func() {
		defer cancel()
		for range 600 {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				n, _ := strconv.Atoi(string(b))
				pid <- n
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	start := time.Now()
	res := r.runOne(ctx, numbered{N: 1, Mutation: m})

	assert.Equal(t, resultInterrupted, res.Result)
	assert.Less(t, time.Since(start), 50*time.Second, "the tests were stopped, not waited for")
	select {
	case p := <-pid:
		require.Eventually(t, func() bool { return gone(p) }, 10*time.Second, 50*time.Millisecond,
			"the test binary %d outlived the run", p)
	default:
		t.Fatal("the test binary never started")
	}
}

func TestASignalEndsTheRunsContext(t *testing.T) {
	t.Parallel()
	ctx, stop := onSignals(&bytes.Buffer{})
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	select {
	case <-ctx.Done():
		assert.ErrorContains(t, context.Cause(ctx), "interrupted by hangup")
	case <-time.After(10 * time.Second):
		t.Fatal("the signal did not end the context")
	}
}

// gone reports whether process pid has ended: it does not exist, or is a
// zombie nobody has reaped yet.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ")".
	_, rest, _ := bytes.Cut(stat[bytes.LastIndexByte(stat, ')')+1:], []byte(" "))
	return bytes.HasPrefix(rest, []byte("Z"))
}
