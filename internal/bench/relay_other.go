//go:build !linux

package bench

func newPlatformTimer() platformTimer { return nil }
