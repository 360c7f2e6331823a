//go:build !linux

package netrelay

func newPlatformTimer() platformTimer { return nil }
