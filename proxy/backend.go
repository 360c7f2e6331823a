package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Command bytes (client → server).
const (
	comQuit            = 0x01
	comInitDB          = 0x02
	comQuery           = 0x03
	comFieldList       = 0x04
	comStatistics      = 0x09
	comProcessKill     = 0x0c
	comPing            = 0x0e
	comChangeUser      = 0x11
	comStmtPrepare     = 0x16
	comStmtExecute     = 0x17
	comStmtSendLong    = 0x18
	comStmtClose       = 0x19
	comStmtReset       = 0x1a
	comSetOption       = 0x1b
	comStmtFetch       = 0x1c
	comResetConnection = 0x1f
)

// backendCaps are the capabilities every backend connection negotiates. The
// wire-format flags (no DEPRECATE_EOF, no QUERY_ATTRIBUTES) match what
// holdfast advertises to clients, so results relay unchanged; SESSION_TRACK
// is on so OK packets report session state changes; MULTI_STATEMENTS is on
// and toggled per client with COM_SET_OPTION.
const backendCaps = mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_MULTI_RESULTS |
	mysql.CLIENT_PS_MULTI_RESULTS | mysql.CLIENT_SESSION_TRACK

// backendInitSQL runs on every new (or reset) backend connection.
const backendInitSQL = "SET SESSION session_track_system_variables = '*', session_track_schema = ON, session_track_state_change = ON"

// variant is a pool key: the backend account a connection is logged in
// as (the high 24 bits: an account id, see accounts.go; 0 is
// backend.user), and the capabilities it negotiated that change what a
// client sees on the wire (the low 8 bits). A session only ever uses
// connections of its own variant.
type variant uint32

const (
	varFoundRows variant = 1 << iota // CLIENT_FOUND_ROWS: affected rows count matched rows
	varTypeInfo                      // MariaDB extended type info in column definitions
	// varNoLocalFiles: no CLIENT_LOCAL_FILES, so the backend refuses LOAD
	// DATA LOCAL itself. Off is the common case (go-sql-driver, the
	// mariadb client and node's mysql2 allow LOCAL files), so that their
	// connections are the ones holdfast's own work and pool.min use.
	varNoLocalFiles

	varCaps variant = 0xff // the capability bits
)

// clientVariant is the variant a client with these capabilities needs, on
// the service account (see withAccount).
func clientVariant(caps, ext uint32) variant {
	var v variant
	if caps&mysql.CLIENT_FOUND_ROWS != 0 {
		v |= varFoundRows
	}
	if ext&mysqlwire.ExtTypeInfo != 0 {
		v |= varTypeInfo
	}
	if caps&mysql.CLIENT_LOCAL_FILES == 0 {
		v |= varNoLocalFiles
	}
	return v
}

// account is the id of the backend account of v's connections.
func (v variant) account() uint32 { return uint32(v >> 8) }

// withAccount is v on the backend account with id a.
func (v variant) withAccount(a uint32) variant { return v&varCaps | variant(a)<<8 }

// backendInfo is what the first backend connection's greeting said.
type backendInfo struct {
	mariaDB bool   // no CLIENT_MYSQL (LONG_PASSWORD) flag: MariaDB, with extended capabilities
	extCaps uint32 // MariaDB extended capabilities offered
}

// BackendSettings says how to reach the backend, and as whom.
type BackendSettings struct {
	Address  string
	User     string
	Password string
	// PasswordHash, when set, is SHA1(password), used instead of Password
	// (an account learned at a client's login, see frombackend.go).
	PasswordHash []byte
	Database     string
	Collation    string
	DialTimeout  time.Duration
	TLS          backendTLS
}

// backendConn is one connection to the backend. It is owned by exactly one
// borrower at a time (or by the pool while idle); nothing here is safe for
// concurrent use except threadID, which is immutable.
type backendConn struct {
	slot     pool.Slot // the pool's bookkeeping (see pool.Conn)
	be       *backend  // the server it is open to (nil for holdfast's own dials)
	threadID uint32
	version  string
	nc       net.Conn
	sock     io.ReadWriter   // nc's bytes (mysqlwire.SockIO over a TCP socket)
	raw      syscall.RawConn // for alive(); nil when nc has none
	// peek is alive's probe of raw, made once per connection (a closure
	// made per call would be two allocations per statement), and peekLive
	// what it found. Only the connection's holder calls alive.
	peek     func(fd uintptr) bool
	peekLive bool
	r        mysqlwire.Reader
	w        mysqlwire.Writer
	variant  variant // capabilities negotiated that clients see (a pool key)
	info     backendInfo
	// server is the server the dial reached (topology.go), read at the
	// dial; "" when unknown. It does not change.
	server serverID

	// Session state on this connection as holdfast last set or observed it.
	vars       *varstate.State
	db         string
	dbKnown    bool
	multiStmts bool
	stmts      *stmtCache

	scratch []byte
	// cmd holds a command handed to the socket by sendCommand until the
	// reply's first read writes it.
	cmd []byte

	// pipe is the connection's pipe while pipelined statements share it,
	// reset for each run (see joinPipe), so that its buffers serve the
	// next run. Nobody refers to it once the last statement has left.
	pipe pipe
}

// dialBackend opens and initialises one backend connection.
func dialBackend(ctx context.Context, s BackendSettings, v variant) (*backendConn, error) {
	d := &net.Dialer{Timeout: s.DialTimeout, KeepAlive: 30 * time.Second}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.DialTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.DialTimeout)
		defer cancel()
	}
	var sniff *dialConn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// The whole connection phase, TLS included, within the dial's bound.
		dl, _ := ctx.Deadline()
		_ = nc.SetDeadline(dl)
		sniff = &dialConn{Conn: nc, under: nc, ctx: ctx, tls: s.TLS, hash: s.PasswordHash}
		if v&varTypeInfo != 0 {
			sniff.wantExt = mysqlwire.ExtTypeInfo
		}
		return sniff, nil
	}
	password := s.Password
	if s.PasswordHash != nil {
		password = "-" // any: dialConn computes the scramble from the hash
	}
	cc, err := client.ConnectWithDialer(ctx, "tcp", s.Address, s.User, password, s.Database, dial,
		func(c *client.Conn) error {
			if err := c.SetCollation(s.Collation); err != nil {
				return err
			}
			c.UnsetCapability(mysql.CLIENT_DEPRECATE_EOF)
			c.UnsetCapability(mysql.CLIENT_QUERY_ATTRIBUTES)
			for _, f := range []uint32{mysql.CLIENT_MULTI_STATEMENTS, mysql.CLIENT_MULTI_RESULTS, mysql.CLIENT_PS_MULTI_RESULTS, mysql.CLIENT_SESSION_TRACK} {
				if err := c.SetCapability(f); err != nil {
					return err
				}
			}
			if v&varFoundRows == 0 {
				c.UnsetCapability(mysql.CLIENT_FOUND_ROWS)
			} else if err := c.SetCapability(mysql.CLIENT_FOUND_ROWS); err != nil {
				return err
			}
			if v&varNoLocalFiles != 0 {
				c.UnsetCapability(mysql.CLIENT_LOCAL_FILES)
			} else if err := c.SetCapability(mysql.CLIENT_LOCAL_FILES); err != nil {
				return err
			}
			c.SetAttributes(map[string]string{"program_name": "holdfast"})
			return nil
		})
	if err != nil {
		if sniff != nil && sniff.failed != nil {
			err = sniff.failed
		}
		err = fmt.Errorf("proxy: connect to backend %s as %s: %w", s.Address, s.User, unwrapMyError(err))
		if loginRefused(err) {
			err = pool.Refused(err)
		}
		return nil, err
	}
	if v&varTypeInfo != 0 && sniff.gotExt&mysqlwire.ExtTypeInfo == 0 {
		cc.Close()
		return nil, fmt.Errorf("proxy: backend %s did not accept MariaDB extended type info", s.Address)
	}
	nc := sniff.under // the TLS connection, or the TCP one
	_ = nc.SetDeadline(time.Time{})
	sock := mysqlwire.NewSockIO(nc)
	bc := &backendConn{
		threadID:   cc.GetConnectionID(),
		version:    cc.GetServerVersion(),
		nc:         nc,
		sock:       sock,
		r:          mysqlwire.Reader{Buf: bufio.NewReaderSize(sock, 64<<10)},
		w:          mysqlwire.Writer{Buf: bufio.NewWriterSize(sock, 64<<10)},
		variant:    v,
		info:       backendInfo{mariaDB: sniff.srvCaps&mysql.CLIENT_LONG_PASSWORD == 0, extCaps: sniff.srvExt},
		db:         s.Database,
		dbKnown:    true,
		multiStmts: true,
	}
	if sc, ok := sniff.Conn.(syscall.Conn); ok {
		bc.raw, _ = sc.SyscallConn() // the TCP socket, under TLS too
		bc.peek = bc.peekFD
	}
	if err := bc.initDialed(ctx); err != nil {
		bc.close()
		return nil, fmt.Errorf("proxy: initialise backend connection: %w", err)
	}
	return bc, nil
}

// loginRefused reports whether a failed connection phase is the server
// refusing the account (its password, the account itself, the database,
// the authentication method): a dial again soon would be refused again.
func loginRefused(err error) bool {
	var e *mysqlwire.SQLError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case 1044, // ER_DBACCESS_DENIED_ERROR
		codeAccessDenied,
		1049, // ER_BAD_DB_ERROR
		codeAuthMode,
		1524, // ER_PLUGIN_IS_NOT_LOADED
		1698, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR
		1862, // ER_MUST_CHANGE_PASSWORD_LOGIN
		3118, // MySQL: ER_ACCOUNT_HAS_BEEN_LOCKED
		4151: // MariaDB: ER_ACCOUNT_HAS_BEEN_LOCKED
		return true
	}
	return false
}

// unwrapMyError digs the MySQL error out of go-mysql's traced wrappers so
// that its code survives.
func unwrapMyError(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) {
		return &mysqlwire.SQLError{Code: me.Code, State: me.State, Msg: me.Message}
	}
	return err
}

// close closes the connection, and with it its prepared statements.
func (bc *backendConn) close() {
	_ = bc.nc.Close()
	bc.stmts.forget()
}

// The pool.Conn methods. The pool calls them only while it owns the
// connection.

func (bc *backendConn) Key() variant         { return bc.variant }
func (bc *backendConn) Alive() bool          { return bc.alive() }
func (bc *backendConn) Close()               { bc.close() }
func (bc *backendConn) PoolSlot() *pool.Slot { return &bc.slot }
func (bc *backendConn) Ping(ctx context.Context) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Second)
	}
	return bc.ping(time.Until(dl))
}

// alive is a cheap check that an idle connection has not been closed by
// the server: a non-blocking peek at the TCP socket must find nothing to
// read. It peeks (MSG_PEEK) rather than reads, so that with TLS it looks
// under the TLS connection without consuming a record: nothing there
// (EAGAIN) is alive; the end of the stream (the server closed) or any
// bytes (an ERR sent before closing, a TLS alert: a server sends nothing
// unsolicited to an idle connection otherwise) are not. TLS 1.3 session
// tickets, the one record a server sends on its own, arrive with the
// handshake and are consumed by the connection's first exchanges, before
// it is ever idle. A connection idle past pool.ping_after_idle is pinged
// as well.
func (bc *backendConn) alive() bool {
	if bc.r.Buf.Buffered() > 0 {
		return false
	}
	if bc.raw == nil {
		return true
	}
	bc.peekLive = false
	err := bc.raw.Read(bc.peek)
	return err == nil && bc.peekLive
}

// peekFD is alive's probe of the socket fd; it sets peekLive.
func (bc *backendConn) peekFD(fd uintptr) bool {
	// Nothing to read (EAGAIN) is alive. The end of the stream (n == 0, no
	// error), unsolicited data (n > 0: protocol state unknown) or any
	// other error is not.
	n, err := peekSocket(fd)
	bc.peekLive = n <= 0 && err == syscall.EAGAIN // a bare Errno: compared, not unwrapped
	return true
}

// peekSocket looks at socket fd without consuming or waiting: n > 0 means
// bytes are queued, n == 0 with no error the end of the stream, EAGAIN
// nothing yet. The backend liveness probe and a client session's wait for
// its next command both use it.
func peekSocket(fd uintptr) (int, error) {
	var b [1]byte
	// A raw system call: it cannot block (see mysqlwire.SockIO).
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// writeCommand sends one command packet, starting a new exchange.
func (bc *backendConn) writeCommand(payload []byte) error {
	bc.w.Seq = 0
	if err := bc.w.WritePacket(payload); err != nil {
		return err
	}
	return bc.w.FlushTurn(&bc.r)
}

// maxSentBeforeRead is the largest command sendCommand leaves for the
// reply's first read to write; a larger one is written at once.
const maxSentBeforeRead = 16 << 10

// sendCommand is writeCommand for a command whose reply the caller reads
// next on this goroutine: over a TCP socket the command is written by the
// reply's first read, which then waits without a read of its own (see
// mysqlwire.SockIO.SendBeforeRead). Anything already buffered to either
// side, a large command or a socket without a SockIO takes writeCommand's
// way.
func (bc *backendConn) sendCommand(payload []byte) error {
	sio, ok := bc.sock.(*mysqlwire.SockIO)
	if !ok || len(payload) > maxSentBeforeRead || bc.r.Buf.Buffered() > 0 || bc.w.Buf != nil && bc.w.Buf.Buffered() > 0 {
		return bc.writeCommand(payload)
	}
	bc.cmd = mysqlwire.AppendCommand(bc.cmd[:0], payload)
	sio.SendBeforeRead(bc.cmd, nil)
	bc.w.Seq = 1
	bc.r.Seq = 1
	return nil
}

func (bc *backendConn) writeCommandString(cmd byte, arg string) error {
	b := append(bc.scratch[:0], cmd)
	b = append(b, arg...)
	bc.scratch = b
	return bc.writeCommand(b)
}

// readPacket reads one whole response packet into the connection's scratch
// buffer; the result is valid until the next read.
func (bc *backendConn) readPacket() ([]byte, error) {
	p, err := bc.r.ReadPacket(bc.scratch, 0)
	bc.scratch = p[:0]
	if err == nil && len(p) == 0 {
		err = fmt.Errorf("%w: empty packet from backend", errMalformed)
	}
	return p, err
}

// readOK reads an OK or ERR response. An ERR comes back as *mysqlwire.SQLError.
func (bc *backendConn) readOK() (mysqlwire.OK, error) {
	p, err := bc.readPacket()
	if err != nil {
		return mysqlwire.OK{}, err
	}
	switch p[0] {
	case mysqlwire.HeaderOK:
		ok, good := mysqlwire.ParseOK(p, true)
		if !good {
			return ok, fmt.Errorf("%w: bad OK packet", errMalformed)
		}
		return ok, nil
	case mysqlwire.HeaderErr:
		return mysqlwire.OK{}, mysqlwire.ParseErr(p)
	}
	return mysqlwire.OK{}, fmt.Errorf("%w: unexpected packet 0x%02x", errMalformed, p[0])
}

// textResult is a fully read text-protocol result, for holdfast's own
// queries (small by construction).
type textResult struct {
	columns      []string
	rows         [][][]byte
	affectedRows uint64
	insertID     uint64
	status       uint16
}

// query runs one statement with the text protocol and reads the whole
// result. Cancelling ctx interrupts the I/O; the connection is then broken.
// A *mysqlwire.SQLError means the statement failed and the connection is
// still good.
func (bc *backendConn) query(ctx context.Context, sql string) (*textResult, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = bc.nc.SetDeadline(dl)
		defer bc.nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = bc.nc.SetDeadline(time.Unix(1, 0)) })
	res, err := bc.queryLocked(sql)
	if !stop() && err != nil {
		if ce := ctx.Err(); ce != nil {
			err = fmt.Errorf("%w (%w)", ce, err)
		}
	}
	return res, err
}

func (bc *backendConn) queryLocked(sql string) (*textResult, error) {
	if err := bc.writeCommandString(comQuery, sql); err != nil {
		return nil, err
	}
	res := &textResult{}
	for {
		more, err := bc.readOneResult(res)
		if err != nil || !more {
			return res, err
		}
	}
}

// readOneResult reads one result of a possibly multi-result response into
// res (rows of later results are appended) and reports whether more follow.
func (bc *backendConn) readOneResult(res *textResult) (bool, error) {
	p, err := bc.readPacket()
	if err != nil {
		return false, err
	}
	switch p[0] {
	case mysqlwire.HeaderOK:
		ok, good := mysqlwire.ParseOK(p, true)
		if !good {
			return false, fmt.Errorf("%w: bad OK packet", errMalformed)
		}
		res.affectedRows, res.insertID, res.status = ok.AffectedRows, ok.InsertID, ok.Status
		return ok.Status&mysqlwire.StatusMoreResults != 0, nil
	case mysqlwire.HeaderErr:
		return false, mysqlwire.ParseErr(p)
	case mysqlwire.HeaderLocalInfile:
		return false, fmt.Errorf("%w: unexpected LOCAL INFILE request", errMalformed)
	}
	ncols, _, _, ok := mysqlwire.ReadLenEnc(p)
	if !ok {
		return false, fmt.Errorf("%w: bad column count", errMalformed)
	}
	cols := make([]string, 0, ncols)
	for i := uint64(0); i < ncols; i++ {
		p, err := bc.readPacket()
		if err != nil {
			return false, err
		}
		cols = append(cols, string(mysqlwire.ColumnName(p)))
	}
	if p, err = bc.readPacket(); err != nil {
		return false, err
	} else if !mysqlwire.IsEOF(p[0], len(p)) {
		return false, fmt.Errorf("%w: missing EOF after columns", errMalformed)
	}
	res.columns = cols
	for {
		p, err := bc.readPacket()
		if err != nil {
			return false, err
		}
		if mysqlwire.IsEOF(p[0], len(p)) {
			_, res.status = mysqlwire.EOFStatus(p)
			return res.status&mysqlwire.StatusMoreResults != 0, nil
		}
		if p[0] == mysqlwire.HeaderErr {
			return false, mysqlwire.ParseErr(p)
		}
		row, ok := mysqlwire.ParseTextRow(make([][]byte, 0, ncols), p)
		if !ok {
			return false, fmt.Errorf("%w: bad row", errMalformed)
		}
		for i, v := range row {
			if v != nil {
				row[i] = append(make([]byte, 0, len(v)), v...) // p is the connection's scratch
			}
		}
		res.rows = append(res.rows, row)
	}
}

// pingStatus sends COM_PING and returns the server status flags.
func (bc *backendConn) pingStatus() (uint16, error) {
	if err := bc.writeCommand([]byte{comPing}); err != nil {
		return 0, err
	}
	ok, err := bc.readOK()
	return ok.Status, err
}

// ping sends COM_PING and waits for the OK.
func (bc *backendConn) ping(timeout time.Duration) error {
	_ = bc.nc.SetDeadline(time.Now().Add(timeout))
	defer bc.nc.SetDeadline(time.Time{})
	if err := bc.writeCommand([]byte{comPing}); err != nil {
		return err
	}
	_, err := bc.readOK()
	return err
}

// reset returns the connection to a fresh session (COM_RESET_CONNECTION),
// then re-applies holdfast's own session settings and character set.
func (bc *backendConn) reset(base *varstate.State, timeout time.Duration) error {
	_ = bc.nc.SetDeadline(time.Now().Add(timeout))
	defer bc.nc.SetDeadline(time.Time{})
	if err := bc.writeCommand([]byte{comResetConnection}); err != nil {
		return err
	}
	if _, err := bc.readOK(); err != nil {
		return err
	}
	sql := backendInitSQL
	if base != nil {
		if cs, ok := base.Lookup("character_set_connection"); ok {
			sql += ", NAMES '" + cs + "' COLLATE '" + base.Get("collation_connection") + "'"
		}
	}
	if _, err := bc.queryLocked(sql); err != nil {
		return err
	}
	bc.vars = base
	bc.dbKnown = false
	bc.stmts.forget()
	// COM_RESET_CONNECTION leaves the COM_SET_OPTION state as it was
	// (MariaDB 10.11 keeps multi-statements off); turn it back on, as on a
	// fresh connection, rather than rely on either server's behaviour.
	if !bc.multiStmts {
		return bc.setMultiStatements(true)
	}
	return nil
}

// setMultiStatements toggles multi-statement support with COM_SET_OPTION.
func (bc *backendConn) setMultiStatements(on bool) error {
	opt := byte(1) // MYSQL_OPTION_MULTI_STATEMENTS_OFF
	if on {
		opt = 0
	}
	if err := bc.writeCommand([]byte{comSetOption, opt, 0}); err != nil {
		return err
	}
	p, err := bc.readPacket()
	if err != nil {
		return err
	}
	switch {
	case p[0] == mysqlwire.HeaderErr:
		return mysqlwire.ParseErr(p)
	case mysqlwire.IsEOF(p[0], len(p)) || p[0] == mysqlwire.HeaderOK:
		bc.multiStmts = on
		return nil
	}
	return fmt.Errorf("%w: unexpected reply to COM_SET_OPTION", errMalformed)
}

// bound puts a deadline d from now on the connection's I/O, for one of
// holdfast's own exchanges (restoring state, preparing, reading back); the
// returned function lifts it. A backend that does not answer in time
// breaks the connection (an I/O error), which is then closed.
func (bc *backendConn) bound(d time.Duration) func() {
	_ = bc.nc.SetDeadline(time.Now().Add(d))
	return func() { _ = bc.nc.SetDeadline(time.Time{}) }
}

// isIOError reports whether err broke the connection (as opposed to a MySQL
// error reply, after which the connection is still usable).
func isIOError(err error) bool {
	var se *mysqlwire.SQLError
	return err != nil && !errors.As(err, &se)
}
