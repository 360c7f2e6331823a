package holdfastproc

import (
	"bufio"
	"os"
	"strings"
)

// Tail returns the last n lines of the file at path ("" when it cannot be
// read).
func Tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogProblems returns the lines of holdfast's log at path that show a
// crash, a data race or a panic recovered in a client session (shortened
// to the panic and the frame that raised it).
func LogProblems(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.Contains(l, "WARNING: DATA RACE"):
			out = append(out, l)
		case strings.Contains(l, `msg="panic`):
			out = append(out, shortPanic(l))
		}
	}
	return out
}

// shortPanic shortens a logged panic with its stack (slog text, newlines
// escaped) to the message and the frame that panicked.
func shortPanic(l string) string {
	head, stack, _ := strings.Cut(l, " stack=")
	frames := strings.Split(stack, `\n`)
	// "panic(...)", its file, then the function that panicked and its file.
	for i, fr := range frames {
		if strings.HasPrefix(fr, "panic(") && i+3 < len(frames) {
			fn := frames[i+2]
			if j := strings.LastIndexByte(fn, '('); j > 0 {
				fn = fn[:j]
			}
			at, _, _ := strings.Cut(strings.TrimPrefix(frames[i+3], `\t`), " ")
			return head + " in " + fn + " at " + at
		}
	}
	return head
}
