//go:build !linux

package restest

import "time"

type sleeper struct{}

func newSleeper() *sleeper             { return &sleeper{} }
func (*sleeper) sleep(d time.Duration) { time.Sleep(d) }
func (*sleeper) close()                {}
