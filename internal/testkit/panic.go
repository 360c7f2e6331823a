package testkit

import "testing"

// MustPanic calls f and fails t, naming what, when f returns without
// panicking.
func MustPanic(t testing.TB, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}
