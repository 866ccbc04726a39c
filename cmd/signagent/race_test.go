//go:build race

package main

// raceEnabled: the tests are built with the race detector, which makes
// the agents they start several times slower.
const raceEnabled = true
