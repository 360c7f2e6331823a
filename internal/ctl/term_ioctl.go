//go:build linux || darwin

package ctl

import (
	"os"
	"syscall"
	"unsafe"
)

// TerminalWidth reports whether f is a terminal and, if so, its width in
// columns (80 when the terminal does not say).
func TerminalWidth(f *os.File) (width int, ok bool) {
	var ws struct{ row, col, xpixel, ypixel uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws)))
	if errno != 0 {
		return 0, false
	}
	if ws.col == 0 {
		return 80, true
	}
	return int(ws.col), true
}
