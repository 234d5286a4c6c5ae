//go:build race

package peer

// raceEnabled: the race detector's sync.Pool drops what it is given at
// random, so counts of allocations mean nothing under it.
const raceEnabled = true
