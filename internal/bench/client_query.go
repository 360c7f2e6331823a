package bench

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Query runs one statement and reads its whole reply, returning the number
// of rows received over all result sets: Exec without the rows' values. An
// ERR reply is a *ServerError and leaves the connection usable; any other
// error leaves it broken.
func (c *Client) Query(q string) (rows int, err error) {
	r, err := c.Exec(q, nil)
	return r.Rows, err
}

// Reply is what one statement sent with Client.Exec returned.
type Reply struct {
	// Affected is the affected-rows count of the final OK packet (for a
	// CALL, the OK that ends it: 0).
	Affected uint64
	// Rows counts the rows of every result set.
	Rows int
}

// Exec runs one statement and reads its whole reply (every result set,
// as CALL sends them), reporting the rows received and the affected rows
// of the OK packet that ends it. When row is not nil it is called
// with the column values of every row received (nil for SQL NULL), valid
// only during the call; an error it returns is returned by Exec after the
// reply has been read to its end, so the connection stays usable. An ERR
// reply is a *ServerError and leaves the connection usable; any other error
// leaves it broken.
func (c *Client) Exec(q string, row func(cols [][]byte) error) (Reply, error) {
	var r Reply
	var rowErr error
	c.seq = 0
	b := append(c.startPacket(), 0x03) // COM_QUERY
	b = append(b, q...)
	if err := c.writePacket(b); err != nil {
		return r, err
	}
	var cols [][]byte
	for {
		p, err := c.readPacket()
		if err != nil {
			return r, err
		}
		switch p[0] {
		case 0x00: // OK
			aff, more, ok := parseOK(p[1:])
			if !ok {
				return r, fmt.Errorf("%w: OK packet", ErrProtocol)
			}
			r.Affected = aff
			if !more {
				return r, rowErr
			}
			continue
		case 0xff:
			return r, parseErr(p)
		case 0xfb:
			return r, fmt.Errorf("bench: LOCAL INFILE request refused")
		}
		ncols, _, ok := lenenc(p)
		if !ok || ncols == 0 || ncols > 4096 {
			return r, fmt.Errorf("%w: column count", ErrProtocol)
		}
		for range ncols {
			if _, err := c.readPacket(); err != nil {
				return r, err
			}
		}
		if c.caps&capDeprecateEOF == 0 {
			if p, err = c.readPacket(); err != nil {
				return r, err
			}
			if !isEOF(p) {
				return r, fmt.Errorf("%w: no EOF after column definitions", ErrProtocol)
			}
		}
		more := false
	readRows:
		for {
			p, err := c.readPacket()
			if err != nil {
				return r, err
			}
			switch {
			case p[0] == 0xff:
				return r, parseErr(p)
			case c.caps&capDeprecateEOF == 0 && isEOF(p):
				more = len(p) >= 5 && binary.LittleEndian.Uint16(p[3:])&statusMoreResults != 0
				break readRows
			case c.caps&capDeprecateEOF != 0 && p[0] == 0xfe && len(p) < maxPayload:
				var ok bool
				if _, more, ok = parseOK(p[1:]); !ok {
					return r, fmt.Errorf("%w: result set terminator", ErrProtocol)
				}
				break readRows
			}
			r.Rows++
			if row == nil || rowErr != nil {
				continue
			}
			if cols, err = parseTextRow(p, int(ncols), cols[:0]); err != nil {
				return r, err
			}
			rowErr = row(cols)
		}
		if !more {
			return r, rowErr
		}
	}
}

func isEOF(p []byte) bool { return p[0] == 0xfe && len(p) < 9 }

// SetDeadline sets the read and write deadline of the connection; a zero
// t clears it. Past the deadline every call fails and the connection is
// broken.
func (c *Client) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// parseOK reads an OK packet body (after its header byte): the affected
// rows and whether SERVER_MORE_RESULTS_EXISTS is set.
func parseOK(body []byte) (affected uint64, more, ok bool) {
	affected, n1, ok1 := lenenc(body)
	if !ok1 {
		return 0, false, false
	}
	_, n2, ok2 := lenenc(body[n1:]) // last insert id
	if !ok2 || len(body) < n1+n2+2 {
		return 0, false, false
	}
	return affected, binary.LittleEndian.Uint16(body[n1+n2:])&statusMoreResults != 0, true
}

// parseTextRow splits a text-protocol row into its ncols values, appended
// to dst (nil for NULL); the values alias p.
func parseTextRow(p []byte, ncols int, dst [][]byte) ([][]byte, error) {
	for i := 0; i < ncols; i++ {
		if len(p) == 0 {
			return dst, fmt.Errorf("%w: row has %d of %d columns", ErrProtocol, i, ncols)
		}
		if p[0] == 0xfb {
			dst = append(dst, nil)
			p = p[1:]
			continue
		}
		n, w, ok := lenenc(p)
		if !ok || uint64(len(p)-w) < n {
			return dst, fmt.Errorf("%w: column %d of a row", ErrProtocol, i+1)
		}
		dst = append(dst, p[w:w+int(n)])
		p = p[w+int(n):]
	}
	if len(p) != 0 {
		return dst, fmt.Errorf("%w: %d bytes after the last column of a row", ErrProtocol, len(p))
	}
	return dst, nil
}
