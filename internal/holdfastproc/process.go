package holdfastproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options say how to run holdfast serve.
type Options struct {
	Bin    string   // the holdfast binary
	Config string   // path of the configuration file, passed as -config
	Args   []string // more arguments after -config (e.g. -cpuprofile FILE)
	Dir    string   // working directory; "" is this process's
	// Env is added to this process's environment, which the child gets
	// without HOLDFAST_* variables (they would override the file) and
	// without the variables named in Unset. A later entry of a name wins.
	Env   []string
	Unset []string
	// LogPath is the file the child's stdout and stderr are appended to,
	// every incarnation's after a line "---- start TIME"; Output is a
	// writer they go to instead when LogPath is "". Both empty: discarded.
	LogPath string
	Output  io.Writer
	// Ready reports whether a started incarnation serves; Start polls it
	// every 100 ms. nil: a TCP connection to Listen is accepted.
	Ready  func(ctx context.Context) error
	Listen string // where clients connect; used by the default Ready
	Name   string // what errors call the process; "" is "holdfast"
}

// ReadyTimeout bounds Start's wait for Ready: a hang guard.
const ReadyTimeout = 30 * time.Second

// Process is one holdfast, run as a child process; it may be killed and
// started again on the same configuration. New starts nothing. Its
// methods are safe for use by several goroutines.
type Process struct {
	o Options

	mu      sync.Mutex // guards following
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited; nil before the first Start
	exitErr error         // cmd.Wait's result, set before done closes
	ended   bool          // the current incarnation was stopped or killed by a caller
	exits   []string      // incarnations that ended without a caller
	starts  int
}

// New returns a Process for o. It starts nothing.
func New(o Options) *Process {
	if o.Name == "" {
		o.Name = "holdfast"
	}
	return &Process{o: o}
}

// Cmdline is the command line Start runs.
func (p *Process) Cmdline() string {
	return p.o.Bin + " " + strings.Join(p.args(), " ")
}

func (p *Process) args() []string {
	return append([]string{"serve", "-config", p.o.Config}, p.o.Args...)
}

// Env returns this process's environment as a child gets it (see
// Options.Env and Unset).
func (p *Process) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "HOLDFAST_") || containsString(p.o.Unset, name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, p.o.Env...)
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Migrate runs `holdfast migrate` on the configuration, with the
// environment and working directory of serve, and returns its output.
func (p *Process) Migrate(ctx context.Context) (output string, err error) {
	cmd := exec.CommandContext(ctx, p.o.Bin, "migrate", "-config", p.o.Config)
	cmd.Dir, cmd.Env = p.o.Dir, p.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("holdfastproc: %s migrate: %w\n%s", p.o.Name, err, out)
	}
	return string(out), nil
}

// Start starts an incarnation and waits, up to ReadyTimeout, until Ready
// holds. An incarnation that does not come up is killed; the error says
// why, with the end of the log. Start must not be called while an
// incarnation runs.
func (p *Process) Start(ctx context.Context) error {
	cmd := exec.Command(p.o.Bin, p.args()...)
	cmd.Dir, cmd.Env = p.o.Dir, p.Env()
	switch {
	case p.o.LogPath != "":
		logf, err := os.OpenFile(p.o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("holdfastproc: %w", err)
		}
		defer logf.Close() // the child has its own descriptor
		fmt.Fprintf(logf, "---- start %s\n", time.Now().Format(time.RFC3339Nano))
		cmd.Stdout, cmd.Stderr = logf, logf
	case p.o.Output != nil:
		cmd.Stdout, cmd.Stderr = p.o.Output, p.o.Output
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("holdfastproc: start %s: %w", p.o.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exitErr, p.ended = cmd, done, nil, false
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		if !p.ended {
			p.exits = append(p.exits, fmt.Sprintf("%s exited by itself: %v", p.o.Name, err))
		}
		p.mu.Unlock()
		close(done)
	}()
	if err := p.waitReady(ctx, done); err != nil {
		p.Kill()
		return err
	}
	return nil
}

func (p *Process) waitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	ready := p.o.Ready
	if ready == nil {
		ready = DialReady(p.o.Listen)
	}
	var last error
	for {
		select {
		case <-done:
			return fmt.Errorf("holdfastproc: %s exited while starting: %v%s", p.o.Name, p.ExitErr(), p.logTail())
		default:
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("holdfastproc: %s not ready within %v: %w (last: %v)%s", p.o.Name, ReadyTimeout, ctx.Err(), last, p.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail is the end of the log for an error: its last 15 lines and its
// path, or nothing when the output goes elsewhere.
func (p *Process) logTail() string {
	if p.o.LogPath == "" {
		return ""
	}
	return fmt.Sprintf(" (log %s)\n%s", p.o.LogPath, Tail(p.o.LogPath, 15))
}

// DialReady is a Ready that holds once a TCP connection to addr is
// accepted.
func DialReady(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// MetricsReady is a Ready that holds once the admin listener at admin
// (host:port) answers GET /metrics.
func MetricsReady(admin string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := Scrape(ctx, admin)
		return err
	}
}

// Signal sends sig to the running incarnation.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return errors.New("holdfastproc: not started")
	}
	return cmd.Process.Signal(sig)
}

// Stop ends the incarnation with SIGTERM, waits up to grace for it to
// drain and exit, then kills it. It returns the exit's error, or an error
// saying it had to be killed. Stop may be called more than once, and
// after the process exited by itself.
func (p *Process) Stop(grace time.Duration) error {
	cmd, done := p.end()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return p.ExitErr()
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return p.ExitErr()
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("holdfastproc: %s did not stop within %v of SIGTERM; killed", p.o.Name, grace)
	}
}

// Kill ends the incarnation with SIGKILL and waits until it has exited.
func (p *Process) Kill() {
	cmd, done := p.end()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// end marks the incarnation as ended by a caller.
func (p *Process) end() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	return p.cmd, p.done
}

// Done is closed when the current incarnation has exited (nil before the
// first Start).
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is the exit's error of the last incarnation that exited (nil:
// a clean exit, or none yet).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Alive reports whether an incarnation runs.
func (p *Process) Alive() bool {
	done := p.Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is the process id of the current incarnation (0 before Start).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Starts counts the incarnations started.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// UnexpectedExits describes the incarnations that exited by themselves,
// neither stopped nor killed by a caller.
func (p *Process) UnexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// LogPath is Options.LogPath.
func (p *Process) LogPath() string { return p.o.LogPath }
