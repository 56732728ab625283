// Package version reports the version of the running build, for /health
// and the command alike.
package version

import "runtime/debug"

// Dev is the version of a build that carries none: `go run`, `go build` in
// a checkout, tests.
const Dev = "dev"

// String returns the main module's version as the build recorded it
// (v1.2.3 for `go install …@v1.2.3`, a pseudo-version for a commit), or Dev
// when it is unknown.
func String() string {
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
