package rawmysql

// Commands and their responses, decoded strictly.

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Command bytes.
const (
	ComQuit             byte = 0x01
	ComInitDB           byte = 0x02
	ComQuery            byte = 0x03
	ComFieldList        byte = 0x04
	ComStatistics       byte = 0x09
	ComProcessKill      byte = 0x0c
	ComPing             byte = 0x0e
	ComChangeUser       byte = 0x11
	ComStmtPrepare      byte = 0x16
	ComStmtExecute      byte = 0x17
	ComStmtSendLongData byte = 0x18
	ComStmtClose        byte = 0x19
	ComStmtReset        byte = 0x1a
	ComSetOption        byte = 0x1b
	ComStmtFetch        byte = 0x1c
	ComResetConnection  byte = 0x1f
)

// Column types.
const (
	TypeTiny      byte = 1
	TypeShort     byte = 2
	TypeLong      byte = 3
	TypeFloat     byte = 4
	TypeDouble    byte = 5
	TypeNull      byte = 6
	TypeTimestamp byte = 7
	TypeLongLong  byte = 8
	TypeInt24     byte = 9
	TypeDate      byte = 10
	TypeTime      byte = 11
	TypeDatetime  byte = 12
	TypeYear      byte = 13
	TypeBlob      byte = 0xfc
	TypeVarString byte = 0xfd
)

// LastStmt is MariaDB's statement id for the statement prepared last.
const LastStmt = uint32(0xffffffff)

// Result is one result of a response: an OK, or a result set.
type Result struct {
	OK        *mysqlwire.OK
	Cols      []Column
	Rows      [][]sql.NullString
	ColStatus uint16 // status of the EOF after the column definitions
	Status    uint16 // status of the OK, or of the EOF closing the rows
}

// Statuses lists the status flags of every OK and EOF packet of results.
func Statuses(rs []Result) []uint16 {
	var out []uint16
	for _, r := range rs {
		if r.OK != nil {
			out = append(out, r.Status)
		} else {
			out = append(out, r.ColStatus, r.Status)
		}
	}
	return out
}

// Cell returns row i, column j of a result set ("NULL" for NULL).
func (r Result) Cell(i, j int) string {
	if i >= len(r.Rows) || j >= len(r.Rows[i]) {
		return fmt.Sprintf("<no cell %d,%d in %d rows>", i, j, len(r.Rows))
	}
	if !r.Rows[i][j].Valid {
		return "NULL"
	}
	return r.Rows[i][j].String
}

// ReadResults reads a complete response of OKs and result sets (following
// MORE_RESULTS) up to an ERR, which is returned as *mysqlwire.SQLError.
// With cursor, a result set whose column EOF says a cursor opened ends the
// response. A LOAD DATA LOCAL file request is answered with no file.
func (c *Conn) ReadResults(binaryRows, cursor bool) ([]Result, error) {
	var out []Result
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return out, err
		}
		switch p[0] {
		case 0xff:
			return out, ErrPacket(p)
		case 0x00:
			ok, err := DecodeOK(p, c.Caps&CapSessionTrack != 0)
			if err != nil {
				return out, err
			}
			out = append(out, Result{OK: &ok, Status: ok.Status})
			if ok.Status&mysqlwire.StatusMoreResults == 0 {
				return out, nil
			}
			continue
		case 0xfb:
			// LOAD DATA LOCAL: this client has no such file.
			if err := c.WritePacket(nil); err != nil {
				return out, err
			}
			continue
		}
		ncols, n, err := lenEnc(p)
		if err != nil || n != len(p) || ncols == 0 {
			return out, fmt.Errorf("%w: column count packet % x", ErrProtocol, p)
		}
		var r Result
		if r.Cols, r.ColStatus, err = c.ReadColumns(int(ncols)); err != nil {
			return out, err
		}
		if cursor && r.ColStatus&mysqlwire.StatusCursorExists != 0 {
			return append(out, r), nil
		}
		r.Rows, r.Status, err = c.ReadRows(r.Cols, binaryRows)
		out = append(out, r)
		if err != nil || r.Status&mysqlwire.StatusMoreResults == 0 {
			return out, err
		}
	}
}

// ReadRows reads rows up to the closing EOF and returns its status.
func (c *Conn) ReadRows(cols []Column, binaryRows bool) ([][]sql.NullString, uint16, error) {
	var rows [][]sql.NullString
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return rows, 0, err
		}
		if isEOF(p) {
			_, st, err := DecodeEOF(p)
			return rows, st, err
		}
		if p[0] == 0xff {
			return rows, 0, ErrPacket(p)
		}
		var row []sql.NullString
		switch {
		case cols == nil: // shape unknown: not decoded
		case binaryRows:
			row, err = DecodeBinaryRow(p, cols)
		default:
			row, err = DecodeTextRow(p, len(cols))
		}
		if err != nil {
			return rows, 0, err
		}
		rows = append(rows, row)
	}
}

// Results sends COM_QUERY and reads the whole response, decoded.
func (c *Conn) Results(sql string) ([]Result, error) {
	if err := c.Command(append([]byte{ComQuery}, sql...)); err != nil {
		return nil, err
	}
	return c.ReadResults(false, false)
}

// RoundTrip sends one command and reads one response packet.
func (c *Conn) RoundTrip(payload []byte) ([]byte, error) {
	if err := c.Command(payload); err != nil {
		return nil, err
	}
	return c.ReadPacket()
}

// FieldList runs COM_FIELD_LIST on table.
func (c *Conn) FieldList(table string) ([]Column, error) {
	if err := c.Command(append(append([]byte{ComFieldList}, table...), 0)); err != nil {
		return nil, err
	}
	return c.ReadFieldList()
}

func (c *Conn) ReadFieldList() ([]Column, error) {
	var cols []Column
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return cols, err
		}
		if isEOF(p) {
			_, _, err := DecodeEOF(p)
			return cols, err
		}
		if p[0] == 0xff {
			return cols, ErrPacket(p)
		}
		col, err := DecodeColumn(p, true, c.Ext&mysqlwire.ExtTypeInfo != 0)
		if err != nil {
			return cols, err
		}
		cols = append(cols, col)
	}
}

// SetOption sends COM_SET_OPTION (0: multi-statements on, 1: off) and
// returns the raw reply.
func (c *Conn) SetOption(opt uint16) ([]byte, error) {
	return c.RoundTrip(binary.LittleEndian.AppendUint16([]byte{ComSetOption}, opt))
}

// ChangeUserPacket builds COM_CHANGE_USER with a scramble against the
// greeting's salt (a server may ignore it and switch authentication).
func (c *Conn) ChangeUserPacket(user, pass, db string) []byte {
	b := append([]byte{ComChangeUser}, user...)
	b = append(b, 0)
	auth := ScrambleNative(c.Salt, []byte(pass))
	b = append(b, byte(len(auth)))
	b = append(b, auth...)
	b = append(b, db...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, DefaultCollation)
	if c.Caps&CapPluginAuth != 0 {
		b = append(b, "mysql_native_password\x00"...)
	}
	return b
}

// ChangeUser runs COM_CHANGE_USER to completion.
func (c *Conn) ChangeUser(user, pass, db string) (switched string, fast bool, err error) {
	if err := c.Command(c.ChangeUserPacket(user, pass, db)); err != nil {
		return "", false, err
	}
	return c.AuthReply(pass)
}

// Prepared statements.

type Stmt struct {
	ID            uint32
	Params, NCols int
	ParamDefs     []Column
	Cols          []Column
	Warnings      uint16
}

func (c *Conn) Prepare(query string) (*Stmt, error) {
	if err := c.Command(append([]byte{ComStmtPrepare}, query...)); err != nil {
		return nil, err
	}
	return c.ReadPrepareOK()
}

// ReadPrepareOK reads a COM_STMT_PREPARE response.
func (c *Conn) ReadPrepareOK() (*Stmt, error) {
	p, err := c.ReadPacket()
	if err != nil {
		return nil, err
	}
	if p[0] == 0xff {
		return nil, ErrPacket(p)
	}
	ok, valid := mysqlwire.ParsePrepareOK(p)
	if !valid || len(p) != 12 || p[9] != 0 { // strict: no trailing bytes, a zero filler
		return nil, fmt.Errorf("%w: prepare OK % x", ErrProtocol, p)
	}
	st := &Stmt{ID: ok.ID, NCols: int(ok.Columns), Params: int(ok.Params), Warnings: ok.Warnings}
	if st.Params > 0 {
		if st.ParamDefs, _, err = c.ReadColumns(st.Params); err != nil {
			return nil, err
		}
	}
	if st.NCols > 0 {
		if st.Cols, _, err = c.ReadColumns(st.NCols); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// ReadColumns reads n column definitions and the EOF after them, and
// returns the EOF's status.
func (c *Conn) ReadColumns(n int) ([]Column, uint16, error) {
	var cols []Column
	for i := 0; i < n; i++ {
		p, err := c.ReadPacket()
		if err != nil {
			return cols, 0, err
		}
		col, err := DecodeColumn(p, false, c.Ext&mysqlwire.ExtTypeInfo != 0)
		if err != nil {
			return cols, 0, err
		}
		cols = append(cols, col)
	}
	p, err := c.ReadPacket()
	if err != nil {
		return cols, 0, err
	}
	_, st, err := DecodeEOF(p)
	return cols, st, err
}

// Param is one COM_STMT_EXECUTE parameter, its value already encoded.
type Param struct {
	Type byte
	Null bool
	Long bool // sent with COM_STMT_SEND_LONG_DATA: no value in the execute
	Val  []byte
}

// StrParam, IntParam, NullParam and LongParam are parameters of those
// types; LongParam's value goes with COM_STMT_SEND_LONG_DATA.
func StrParam(s string) Param {
	return Param{Type: TypeVarString, Val: mysqlwire.AppendLenEncString(nil, []byte(s))}
}
func IntParam(v int64) Param {
	return Param{Type: TypeLongLong, Val: binary.LittleEndian.AppendUint64(nil, uint64(v))}
}
func NullParam() Param { return Param{Type: TypeNull, Null: true} }
func LongParam() Param { return Param{Type: TypeBlob, Long: true} }

// ExecutePacket builds COM_STMT_EXECUTE; bind sets new-params-bound and
// sends the parameter types.
func ExecutePacket(id uint32, flags byte, params []Param, bind bool) []byte {
	b := binary.LittleEndian.AppendUint32([]byte{ComStmtExecute}, id)
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, 1) // iteration count
	if len(params) == 0 {
		return b
	}
	nulls := make([]byte, (len(params)+7)/8)
	for i, p := range params {
		if p.Null {
			nulls[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, nulls...)
	if !bind {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		for _, p := range params {
			b = append(b, p.Type, 0)
		}
	}
	for _, p := range params {
		if !p.Null && !p.Long {
			b = append(b, p.Val...)
		}
	}
	return b
}

// Execute runs COM_STMT_EXECUTE and reads the binary results.
func (c *Conn) Execute(id uint32, flags byte, params []Param, bind bool) ([]Result, error) {
	if err := c.Command(ExecutePacket(id, flags, params, bind)); err != nil {
		return nil, err
	}
	return c.ReadResults(true, flags&0x01 != 0)
}

func (c *Conn) SendLongData(id uint32, param uint16, data []byte) error {
	b := binary.LittleEndian.AppendUint32([]byte{ComStmtSendLongData}, id)
	b = binary.LittleEndian.AppendUint16(b, param)
	return c.Command(append(b, data...)) // no response
}

func (c *Conn) StmtClose(id uint32) error {
	return c.Command(binary.LittleEndian.AppendUint32([]byte{ComStmtClose}, id)) // no response
}

func StmtCmd(cmd byte, id uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{cmd}, id) }

// Fetch runs COM_STMT_FETCH for n rows of a cursor with columns cols.
func (c *Conn) Fetch(id, n uint32, cols []Column) ([][]sql.NullString, uint16, error) {
	if err := c.Command(binary.LittleEndian.AppendUint32(StmtCmd(ComStmtFetch, id), n)); err != nil {
		return nil, 0, err
	}
	return c.ReadRows(cols, true)
}

// ColValues returns column j of the rows as one comma-separated string.
func ColValues(rows [][]sql.NullString, j int) string {
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

// ReadAnyResponse reads whatever the server answers to command cmd and
// checks that it is well formed: the shape expected for cmd, an ERR, or
// (for COM_CHANGE_USER) an authentication switch. It reports whether the
// server asked to switch authentication.
func (c *Conn) ReadAnyResponse(cmd byte) (authSwitch bool, err error) {
	p, err := c.ReadPacket()
	if err != nil {
		return false, err
	}
	if p[0] == 0xff {
		_, err := DecodeErr(p)
		return false, err
	}
	switch {
	case cmd == ComStatistics:
		return false, nil // a bare string
	case cmd == ComChangeUser && p[0] == 0xfe && len(p) > 1:
		if bytes.IndexByte(p[1:], 0) < 0 {
			return false, fmt.Errorf("%w: authentication switch without a plugin name", ErrProtocol)
		}
		return true, nil
	case isEOF(p):
		_, _, err := DecodeEOF(p)
		return false, err
	}
	c.unread(p)
	switch cmd {
	case ComStmtPrepare:
		_, err = c.ReadPrepareOK()
	case ComFieldList:
		_, err = c.ReadFieldList()
	case ComStmtFetch:
		_, _, err = c.ReadRows(nil, true)
	default:
		_, err = c.ReadResults(cmd == ComStmtExecute, true)
	}
	var e *mysqlwire.SQLError
	if errors.As(err, &e) {
		err = nil // a well-formed ERR may end any response
	}
	return false, err
}
