//go:build !(linux || darwin)

package ctl

import "os"

// TerminalWidth reports whether f is a terminal and, if so, its width in
// columns; on this platform the width is not asked for and is taken as 80.
func TerminalWidth(f *os.File) (width int, ok bool) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return 0, false
	}
	return 80, true
}
