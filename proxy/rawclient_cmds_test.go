package proxy

// Commands and responses for the raw test client (rawclient_test.go).

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rawResult is one result of a response: an OK, or a result set.
type rawResult struct {
	ok        *rawOK
	cols      []rawColumn
	rows      [][]sql.NullString
	colStatus uint16 // status of the EOF after the column definitions
	status    uint16 // status of the OK, or of the EOF closing the rows
}

// statuses lists the status flags of every OK and EOF packet of results.
func statuses(rs []rawResult) []uint16 {
	var out []uint16
	for _, r := range rs {
		if r.ok != nil {
			out = append(out, r.status)
		} else {
			out = append(out, r.colStatus, r.status)
		}
	}
	return out
}

// cell returns row i, column j of a result set ("NULL" for NULL).
func (r rawResult) cell(i, j int) string {
	if i >= len(r.rows) || j >= len(r.rows[i]) {
		return fmt.Sprintf("<no cell %d,%d in %d rows>", i, j, len(r.rows))
	}
	if !r.rows[i][j].Valid {
		return "NULL"
	}
	return r.rows[i][j].String
}

// readResults reads a complete response of OKs and result sets (following
// MORE_RESULTS) up to an ERR, which is returned as *rawErr. With cursor,
// a result set whose column EOF says a cursor opened ends the response. A
// LOAD DATA LOCAL file request is answered with no file.
func (c *rawConn) readResults(binaryRows, cursor bool) ([]rawResult, error) {
	var out []rawResult
	for {
		p, err := c.readPacket()
		if err != nil {
			return out, err
		}
		switch p[0] {
		case 0xff:
			return out, errPacket(p)
		case 0x00:
			ok, err := decodeOK(p, c.caps&capSessionTrack != 0)
			if err != nil {
				return out, err
			}
			out = append(out, rawResult{ok: &ok, status: ok.status})
			if ok.status&stMoreResults == 0 {
				return out, nil
			}
			continue
		case 0xfb:
			// LOAD DATA LOCAL: this client has no such file.
			if err := c.writePacket(nil); err != nil {
				return out, err
			}
			continue
		}
		ncols, n, err := lenEnc(p)
		if err != nil || n != len(p) || ncols == 0 {
			return out, fmt.Errorf("rawclient: bad column count packet % x", p)
		}
		var r rawResult
		if r.cols, r.colStatus, err = c.readColumns(int(ncols)); err != nil {
			return out, err
		}
		if cursor && r.colStatus&stCursorExists != 0 {
			return append(out, r), nil
		}
		r.rows, r.status, err = c.readRows(r.cols, binaryRows)
		out = append(out, r)
		if err != nil || r.status&stMoreResults == 0 {
			return out, err
		}
	}
}

// readRows reads rows up to the closing EOF and returns its status.
func (c *rawConn) readRows(cols []rawColumn, binaryRows bool) ([][]sql.NullString, uint16, error) {
	var rows [][]sql.NullString
	for {
		p, err := c.readPacket()
		if err != nil {
			return rows, 0, err
		}
		if isEOFPacket(p) {
			_, st, err := decodeEOF(p)
			return rows, st, err
		}
		if p[0] == 0xff {
			return rows, 0, errPacket(p)
		}
		var row []sql.NullString
		switch {
		case cols == nil: // shape unknown: not decoded
		case binaryRows:
			row, err = decodeBinaryRow(p, cols)
		default:
			row, err = decodeTextRow(p, len(cols))
		}
		if err != nil {
			return rows, 0, err
		}
		rows = append(rows, row)
	}
}

// query sends COM_QUERY and reads the whole response.
func (c *rawConn) query(sql string) ([]rawResult, error) {
	if err := c.command(append([]byte{rcQuery}, sql...)); err != nil {
		return nil, err
	}
	return c.readResults(false, false)
}

func (c *rawConn) mustQuery(sql string) []rawResult {
	c.t.Helper()
	rs, err := c.query(sql)
	if err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	return rs
}

// value returns the first cell of the first result set of sql.
func (c *rawConn) value(sql string) string {
	c.t.Helper()
	rs := c.mustQuery(sql)
	if len(rs) == 0 || rs[0].ok != nil {
		c.t.Fatalf("%s: no result set", sql)
	}
	return rs[0].cell(0, 0)
}

// roundTrip sends one command and reads one response packet.
func (c *rawConn) roundTrip(payload []byte) ([]byte, error) {
	if err := c.command(payload); err != nil {
		return nil, err
	}
	return c.readPacket()
}

// mustOK sends a command whose answer must be a single OK packet.
func (c *rawConn) mustOK(payload []byte) rawOK {
	c.t.Helper()
	p, err := c.roundTrip(payload)
	if err != nil {
		c.t.Fatalf("command 0x%02x: %v", payload[0], err)
	}
	if p[0] == 0xff {
		c.t.Fatalf("command 0x%02x: %v", payload[0], errPacket(p))
	}
	ok, err := decodeOK(p, c.caps&capSessionTrack != 0)
	if err != nil {
		c.t.Fatalf("command 0x%02x: %v", payload[0], err)
	}
	return ok
}

// mustErr sends a command whose answer must be ERR code with SQLSTATE state.
func (c *rawConn) mustErr(payload []byte, code uint16, state string) *rawErr {
	c.t.Helper()
	p, err := c.roundTrip(payload)
	if err != nil {
		c.t.Fatalf("command % x: %v, want ERR %d", trunc(payload), err, code)
	}
	e, err := decodeErr(p)
	if err != nil {
		c.t.Fatalf("command % x: %v, want ERR %d", trunc(payload), err, code)
	}
	if e.Code != code || e.State != state || e.Msg == "" {
		c.t.Fatalf("command % x: %v, want ERR %d (%s) with a message", trunc(payload), e, code, state)
	}
	return e
}

func trunc(b []byte) []byte { return b[:min(len(b), 16)] }

// ping sends COM_PING and returns the OK's status flags.
func (c *rawConn) ping() uint16 {
	c.t.Helper()
	return c.mustOK([]byte{rcPing}).status
}

// fieldList runs COM_FIELD_LIST on table.
func (c *rawConn) fieldList(table string) ([]rawColumn, error) {
	if err := c.command(append(append([]byte{rcFieldList}, table...), 0)); err != nil {
		return nil, err
	}
	return c.readFieldList()
}

func (c *rawConn) readFieldList() ([]rawColumn, error) {
	var cols []rawColumn
	for {
		p, err := c.readPacket()
		if err != nil {
			return cols, err
		}
		if isEOFPacket(p) {
			_, _, err := decodeEOF(p)
			return cols, err
		}
		if p[0] == 0xff {
			return cols, errPacket(p)
		}
		col, err := decodeColumn(p, true, c.ext&rawExtTypeInfo != 0)
		if err != nil {
			return cols, err
		}
		cols = append(cols, col)
	}
}

// setOption sends COM_SET_OPTION (0: multi-statements on, 1: off) and
// returns the raw reply.
func (c *rawConn) setOption(opt uint16) ([]byte, error) {
	return c.roundTrip(binary.LittleEndian.AppendUint16([]byte{rcSetOption}, opt))
}

// changeUserPacket builds COM_CHANGE_USER with a scramble against the
// greeting's salt (a server may ignore it and switch authentication).
func (c *rawConn) changeUserPacket(user, pass, db string) []byte {
	b := append([]byte{rcChangeUser}, user...)
	b = append(b, 0)
	auth := scrambleNative(c.salt, []byte(pass))
	b = append(b, byte(len(auth)))
	b = append(b, auth...)
	b = append(b, db...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, rawDefaultCollation)
	if c.caps&capPluginAuth != 0 {
		b = append(b, "mysql_native_password\x00"...)
	}
	return b
}

// changeUser runs COM_CHANGE_USER to completion.
func (c *rawConn) changeUser(user, pass, db string) (switched string, fast bool, err error) {
	if err := c.command(c.changeUserPacket(user, pass, db)); err != nil {
		return "", false, err
	}
	return c.authReply(pass)
}

// Prepared statements.

type rawStmt struct {
	id            uint32
	params, ncols int
	paramDefs     []rawColumn
	cols          []rawColumn
	warnings      uint16
}

func (c *rawConn) prepare(query string) (*rawStmt, error) {
	if err := c.command(append([]byte{rcStmtPrepare}, query...)); err != nil {
		return nil, err
	}
	return c.readPrepareOK()
}

func (c *rawConn) mustPrepare(query string) *rawStmt {
	c.t.Helper()
	st, err := c.prepare(query)
	if err != nil {
		c.t.Fatalf("prepare %s: %v", query, err)
	}
	return st
}

// readPrepareOK reads a COM_STMT_PREPARE response.
func (c *rawConn) readPrepareOK() (*rawStmt, error) {
	p, err := c.readPacket()
	if err != nil {
		return nil, err
	}
	if p[0] == 0xff {
		return nil, errPacket(p)
	}
	if p[0] != 0x00 || len(p) != 12 || p[9] != 0 {
		return nil, fmt.Errorf("rawclient: malformed prepare OK % x", p)
	}
	st := &rawStmt{
		id:       binary.LittleEndian.Uint32(p[1:]),
		ncols:    int(binary.LittleEndian.Uint16(p[5:])),
		params:   int(binary.LittleEndian.Uint16(p[7:])),
		warnings: binary.LittleEndian.Uint16(p[10:]),
	}
	if st.params > 0 {
		if st.paramDefs, _, err = c.readColumns(st.params); err != nil {
			return nil, err
		}
	}
	if st.ncols > 0 {
		if st.cols, _, err = c.readColumns(st.ncols); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// readColumns reads n column definitions and the EOF after them, and
// returns the EOF's status.
func (c *rawConn) readColumns(n int) ([]rawColumn, uint16, error) {
	var cols []rawColumn
	for i := 0; i < n; i++ {
		p, err := c.readPacket()
		if err != nil {
			return cols, 0, err
		}
		col, err := decodeColumn(p, false, c.ext&rawExtTypeInfo != 0)
		if err != nil {
			return cols, 0, err
		}
		cols = append(cols, col)
	}
	p, err := c.readPacket()
	if err != nil {
		return cols, 0, err
	}
	_, st, err := decodeEOF(p)
	return cols, st, err
}

// rawParam is one COM_STMT_EXECUTE parameter, its value already encoded.
type rawParam struct {
	typ  byte
	null bool
	long bool // sent with COM_STMT_SEND_LONG_DATA: no value in the execute
	val  []byte
}

func pStr(s string) rawParam { return rawParam{typ: tyVarString, val: putLenEncStr(nil, s)} }
func pInt(v int64) rawParam {
	return rawParam{typ: tyLongLong, val: binary.LittleEndian.AppendUint64(nil, uint64(v))}
}
func pNull() rawParam { return rawParam{typ: tyNull, null: true} }
func pLong() rawParam { return rawParam{typ: tyBlob, long: true} }

// executePacket builds COM_STMT_EXECUTE; bind sets new-params-bound and
// sends the parameter types.
func executePacket(id uint32, flags byte, params []rawParam, bind bool) []byte {
	b := binary.LittleEndian.AppendUint32([]byte{rcStmtExecute}, id)
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, 1) // iteration count
	if len(params) == 0 {
		return b
	}
	nulls := make([]byte, (len(params)+7)/8)
	for i, p := range params {
		if p.null {
			nulls[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, nulls...)
	if !bind {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		for _, p := range params {
			b = append(b, p.typ, 0)
		}
	}
	for _, p := range params {
		if !p.null && !p.long {
			b = append(b, p.val...)
		}
	}
	return b
}

// execute runs COM_STMT_EXECUTE and reads the binary results.
func (c *rawConn) execute(id uint32, flags byte, params []rawParam, bind bool) ([]rawResult, error) {
	if err := c.command(executePacket(id, flags, params, bind)); err != nil {
		return nil, err
	}
	return c.readResults(true, flags&0x01 != 0)
}

func (c *rawConn) mustExecute(st *rawStmt, params []rawParam, bind bool) rawResult {
	c.t.Helper()
	rs, err := c.execute(st.id, 0, params, bind)
	if err != nil {
		c.t.Fatalf("execute statement %d: %v", st.id, err)
	}
	if len(rs) != 1 {
		c.t.Fatalf("execute statement %d: %d results", st.id, len(rs))
	}
	return rs[0]
}

func (c *rawConn) sendLongData(id uint32, param uint16, data []byte) error {
	b := binary.LittleEndian.AppendUint32([]byte{rcStmtSendLong}, id)
	b = binary.LittleEndian.AppendUint16(b, param)
	return c.command(append(b, data...)) // no response
}

func (c *rawConn) stmtClose(id uint32) error {
	return c.command(binary.LittleEndian.AppendUint32([]byte{rcStmtClose}, id)) // no response
}

func stmtCmd(cmd byte, id uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{cmd}, id) }

// fetch runs COM_STMT_FETCH for n rows of a cursor with columns cols.
func (c *rawConn) fetch(id, n uint32, cols []rawColumn) ([][]sql.NullString, uint16, error) {
	if err := c.command(binary.LittleEndian.AppendUint32(stmtCmd(rcStmtFetch, id), n)); err != nil {
		return nil, 0, err
	}
	return c.readRows(cols, true)
}

// colValues returns column j of the rows as one comma-separated string.
func colValues(rows [][]sql.NullString, j int) string {
	var parts []string
	for _, r := range rows {
		if r[j].Valid {
			parts = append(parts, r[j].String)
		} else {
			parts = append(parts, "NULL")
		}
	}
	return strings.Join(parts, ",")
}

// readAnyResponse reads whatever the server answers to command cmd and
// checks that it is well formed: the shape expected for cmd, an ERR, or
// (for COM_CHANGE_USER) an authentication switch. It reports whether the
// server asked to switch authentication.
func (c *rawConn) readAnyResponse(cmd byte) (authSwitch bool, err error) {
	p, err := c.readPacket()
	if err != nil {
		return false, err
	}
	if p[0] == 0xff {
		_, err := decodeErr(p)
		return false, err
	}
	switch {
	case cmd == rcStatistics:
		return false, nil // a bare string
	case cmd == rcChangeUser && p[0] == 0xfe && len(p) > 1:
		if bytes.IndexByte(p[1:], 0) < 0 {
			return false, errors.New("rawclient: auth switch without plugin name")
		}
		return true, nil
	case isEOFPacket(p):
		_, _, err := decodeEOF(p)
		return false, err
	}
	c.back = p
	switch cmd {
	case rcStmtPrepare:
		_, err = c.readPrepareOK()
	case rcFieldList:
		_, err = c.readFieldList()
	case rcStmtFetch:
		_, _, err = c.readRows(nil, true)
	default:
		_, err = c.readResults(cmd == rcStmtExecute, true)
	}
	var e *rawErr
	if errors.As(err, &e) {
		err = nil // a well-formed ERR may end any response
	}
	return false, err
}

// rawColumn is a decoded column definition (protocol 4.1).
type rawColumn struct {
	schema, table, orgTable, name, orgName string
	charset                                uint16
	length                                 uint32
	typ                                    byte
	flags                                  uint16
	decimals                               byte
	typeInfo                               []byte // MariaDB extended type info, when negotiated
}

// decodeColumn decodes a column definition; fieldList allows the trailing
// default value COM_FIELD_LIST sends, typeInfo MariaDB's extended type
// info (MARIADB_CLIENT_EXTENDED_TYPE_INFO) after the names.
func decodeColumn(p []byte, fieldList, typeInfo bool) (rawColumn, error) {
	var c rawColumn
	var s [6]string
	pos := 0
	for i := range s {
		v, n, err := lenEncStr(p[pos:])
		if err != nil {
			return c, fmt.Errorf("rawclient: column definition: %w", err)
		}
		s[i] = string(v)
		pos += n
	}
	if s[0] != "def" {
		return c, fmt.Errorf("rawclient: column catalog %q", s[0])
	}
	c.schema, c.table, c.orgTable, c.name, c.orgName = s[1], s[2], s[3], s[4], s[5]
	if typeInfo {
		v, n, err := lenEncStr(p[pos:])
		if err != nil {
			return c, fmt.Errorf("rawclient: column extended type info: %w", err)
		}
		c.typeInfo = append([]byte{}, v...)
		pos += n
	}
	if len(p) < pos+13 || p[pos] != 0x0c {
		return c, errors.New("rawclient: column definition fixed fields truncated")
	}
	f := p[pos+1:]
	c.charset = binary.LittleEndian.Uint16(f)
	c.length = binary.LittleEndian.Uint32(f[2:])
	c.typ = f[6]
	c.flags = binary.LittleEndian.Uint16(f[7:])
	c.decimals = f[9]
	rest := p[pos+13:]
	if fieldList && len(rest) > 0 {
		if rest[0] == 0xfb {
			rest = rest[1:]
		} else if _, n, err := lenEncStr(rest); err == nil {
			rest = rest[n:]
		}
	}
	if len(rest) != 0 {
		return c, fmt.Errorf("rawclient: %d bytes after a column definition", len(rest))
	}
	return c, nil
}

// decodeTextRow decodes a text-protocol row of n columns.
func decodeTextRow(p []byte, n int) ([]sql.NullString, error) {
	row := make([]sql.NullString, 0, n)
	for pos := 0; pos < len(p); {
		if p[pos] == 0xfb {
			row = append(row, sql.NullString{})
			pos++
			continue
		}
		v, k, err := lenEncStr(p[pos:])
		if err != nil {
			return nil, fmt.Errorf("rawclient: text row: %w", err)
		}
		row = append(row, sql.NullString{String: string(v), Valid: true})
		pos += k
	}
	if len(row) != n {
		return nil, fmt.Errorf("rawclient: text row of %d values, want %d", len(row), n)
	}
	return row, nil
}

// decodeBinaryRow decodes a binary-protocol row; values become strings.
func decodeBinaryRow(p []byte, cols []rawColumn) ([]sql.NullString, error) {
	nb := (len(cols) + 7 + 2) / 8
	if len(p) < 1+nb || p[0] != 0x00 {
		return nil, fmt.Errorf("rawclient: malformed binary row % x", p)
	}
	bitmap, b := p[1:1+nb], p[1+nb:]
	row := make([]sql.NullString, len(cols))
	need := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, errors.New("rawclient: binary row truncated")
		}
		v := b[:n]
		b = b[n:]
		return v, nil
	}
	for i, col := range cols {
		if bitmap[(i+2)/8]&(1<<((i+2)%8)) != 0 {
			continue
		}
		unsigned := col.flags&0x20 != 0
		var s string
		switch col.typ {
		case tyTiny, tyShort, tyYear, tyLong, tyInt24, tyLongLong:
			size := map[byte]int{tyTiny: 1, tyShort: 2, tyYear: 2, tyLong: 4, tyInt24: 4, tyLongLong: 8}[col.typ]
			v, err := need(size)
			if err != nil {
				return nil, err
			}
			var u uint64
			for j := size - 1; j >= 0; j-- {
				u = u<<8 | uint64(v[j])
			}
			if unsigned {
				s = strconv.FormatUint(u, 10)
			} else {
				shift := 64 - 8*size
				s = strconv.FormatInt(int64(u<<shift)>>shift, 10)
			}
		case tyFloat:
			v, err := need(4)
			if err != nil {
				return nil, err
			}
			s = strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(v))), 'g', -1, 32)
		case tyDouble:
			v, err := need(8)
			if err != nil {
				return nil, err
			}
			s = strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(v)), 'g', -1, 64)
		case tyNull:
		case tyDate, tyDatetime, tyTimestamp, tyTime:
			l, err := need(1)
			if err != nil {
				return nil, err
			}
			v, err := need(int(l[0]))
			if err != nil {
				return nil, err
			}
			s = fmt.Sprintf("%x", v)
		default:
			v, n, err := lenEncStr(b)
			if err != nil {
				return nil, fmt.Errorf("rawclient: binary row: %w", err)
			}
			s, b = string(v), b[n:]
		}
		row[i] = sql.NullString{String: s, Valid: true}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("rawclient: %d bytes after a binary row", len(b))
	}
	return row, nil
}
