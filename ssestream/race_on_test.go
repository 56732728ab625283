//go:build race

package ssestream

// raceDetector is set when the race detector runs, whose sync.Pool drops
// items at random.
const raceDetector = true
