//go:build race

package chaos

func init() { raceEnabled = true }
