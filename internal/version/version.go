// Package version reports the version of the running build, for /health
// and the command alike.
package version

import "runtime/debug"

// Dev is the version of a build that carries none: `go run`, `go build` in
// a checkout, tests.
const Dev = "dev"

// stamped is the version a release build sets with
// -ldflags "-X github.com/threadline/threadline/internal/version.stamped=v1.2.3"
// (`make static VERSION=v1.2.3`, the Dockerfile's VERSION argument): a build
// from a source tree without its .git, as an image build is, records none.
var stamped string

// String returns the stamped version, else the main module's version as the
// build recorded it (v1.2.3 for `go install …@v1.2.3`, a pseudo-version for
// a commit), or Dev when it is unknown.
func String() string {
	if stamped != "" {
		return stamped
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Dev
	}
	return of(info)
}

func of(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return Dev
}
