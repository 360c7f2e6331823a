package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// RelayCommand is the argument that makes the bench's own executable run
// as the relay (RelayMain), so the relay the bench compares holdfast with
// is a process of its own, as holdfast is: its CPU, system calls and
// scheduling are its own, not shared with the load generator.
const RelayCommand = "relay"

// RelayMain runs a relay (netrelay, no delay) from -listen to -target,
// prints its address on stdout, and serves until stdin closes (the bench
// exited) or the process is signalled.
func RelayMain(args []string) error {
	fs := flag.NewFlagSet(RelayCommand, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	target := fs.String("target", "", "address to relay to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("relay: -target is required")
	}
	r, err := netrelay.Start(*listen, *target, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Println(r.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes
	return nil
}

// RelayProc is a relay running as a child process.
type RelayProc struct {
	Addr    string
	Cmdline string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
}

// StartRelayProc starts this executable as a relay to target.
func StartRelayProc(ctx context.Context, target string) (*RelayProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	p := &RelayProc{cmd: exec.Command(self, RelayCommand, "-target", target)}
	p.Cmdline = strings.Join(p.cmd.Args, " ")
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start relay: %w", err)
	}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			p.Stop()
			return nil, errors.New("bench: the relay process did not start")
		}
		p.Addr = a
		return p, nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	p.Stop()
	return nil, errors.New("bench: the relay process did not report its address")
}

// Pid is the relay's process id.
func (p *RelayProc) Pid() int { return p.cmd.Process.Pid }

// Stop ends the relay and waits for it.
func (p *RelayProc) Stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	dbtest.WaitOrKill(p.cmd.Process, done, 5*time.Second)
}
