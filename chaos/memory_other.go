//go:build !linux

package chaos

import "errors"

var errNoProc = errors.New("peak resident memory is read from /proc, which only Linux has")

func peakRSS(int) (int64, error) { return 0, errNoProc }

func resetPeakRSS(int) error { return errNoProc }
