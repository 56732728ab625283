//go:build !race

package ssestream

const raceDetector = false
