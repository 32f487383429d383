package cli

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// Invocation is how a person in another terminal runs the binary that is
// running now: `go run ./<package>` when it was started with go run (its
// executable sits in the go command's temporary build folder), the path it
// was started by otherwise (./loyalty-dev, /usr/local/bin/oncerun-dev), or
// its bare name when it was found on PATH. A deployment's dev binary thus
// names itself, never oncerun's own.
func Invocation(args0 string, build *debug.BuildInfo) string {
	if strings.Contains(filepath.ToSlash(args0), "/go-build") && build != nil && build.Path != "" {
		rel := strings.TrimPrefix(strings.TrimPrefix(build.Path, build.Main.Path), "/")
		if rel == "" {
			return "go run ."
		}
		return "go run ./" + rel
	}
	if args0 == "" {
		return "oncerun-dev"
	}
	return args0
}

// ThisBinary is Invocation for the running process.
func ThisBinary() string {
	build, _ := debug.ReadBuildInfo()
	return Invocation(os.Args[0], build)
}
