//go:build race

package broker

// raceEnabled: the race detector slows everything down; timing bounds are only logged.
const raceEnabled = true
