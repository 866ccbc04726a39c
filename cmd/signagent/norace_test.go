//go:build !race

package main

// raceEnabled: the tests are built with the race detector.
const raceEnabled = false
