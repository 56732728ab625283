// Package testbin gives tests the real command (cmd/threadline) to run as
// a process: the tests that start servers, crash them and restart them.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Env names a threadline binary built beforehand that Threadline returns
// instead of building one. `make test` builds it once for every package
// whose tests run the real command: without it each of their test
// processes builds and links its own, all at the same time.
const Env = "THREADLINE_TEST_BINARY"

var (
	once   sync.Once
	binary string
	err    error
)

// Threadline returns the path of the real command: the binary Env names,
// or else one built once per test process.
func Threadline(t testing.TB) string {
	t.Helper()
	once.Do(func() { binary, err = find() })
	if err != nil {
		t.Fatal(err)
	}
	return binary
}

func find() (string, error) {
	if bin := os.Getenv(Env); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %v", Env, err)
		}
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "threadline-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "threadline")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/threadline/threadline/cmd/threadline").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}
