package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcMem is a process's resident memory from /proc/<pid>/status.
type ProcMem struct {
	RSS int64 // VmRSS, bytes
	HWM int64 // VmHWM (peak RSS), bytes
}

// ReadProcMem reads VmRSS and VmHWM of pid.
func ReadProcMem(pid int) (ProcMem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcMem{}, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	return parseProcStatus(f)
}

func parseProcStatus(f interface{ Read([]byte) (int, error) }) (ProcMem, error) {
	var m ProcMem
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		fields := strings.Fields(v) // "12345 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return m, fmt.Errorf("bench: /proc status %s: %q", k, v)
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("bench: /proc status %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS = n << 10
		} else {
			m.HWM = n << 10
		}
	}
	if m.RSS == 0 || m.HWM == 0 {
		return m, errors.New("bench: /proc status lacks VmRSS or VmHWM")
	}
	return m, sc.Err()
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat CPU times; 100 on
// every Linux architecture Go supports.
const clockTick = 100

// ProcCPU is the user+system CPU time pid has used, from /proc/<pid>/stat.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (time.Duration, error) {
	// The command name (field 2) may hold spaces: fields after it start
	// after the last ')'. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bench: malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: malformed /proc stat times")
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

// SelfCPU is the user+system CPU time this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RaiseNoFile raises this process's RLIMIT_NOFILE to at least want (soft
// and, when needed and permitted, hard). Calling syscall.Setrlimit also makes
// os/exec hand the raised limit to child processes. It returns the soft limit
// now in force.
func RaiseNoFile(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("bench: getrlimit: %w", err)
	}
	next := lim
	next.Cur = max(lim.Cur, want)
	next.Max = max(lim.Max, next.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		// Not permitted to raise the hard limit: take what it allows.
		next = syscall.Rlimit{Cur: max(lim.Cur, min(want, lim.Max)), Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
			return lim.Cur, fmt.Errorf("bench: setrlimit: %w", err)
		}
	}
	return next.Cur, nil
}

// ProcNoFile reads the soft "Max open files" limit of pid.
func ProcNoFile(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			f := strings.Fields(strings.TrimPrefix(l, "Max open files"))
			if len(f) >= 1 {
				return f[0], nil
			}
		}
	}
	return "", errors.New("bench: no open-files limit in /proc limits")
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
