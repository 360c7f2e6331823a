package rawmysql

import (
	"errors"
	"fmt"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Reply is what one statement sent with Exec returned.
type Reply struct {
	// Affected is the affected-rows count of the final OK packet (for a
	// CALL, the OK that ends it: 0).
	Affected uint64
	// Rows counts the rows of every result set.
	Rows int
}

// maxColumns bounds a result set's column count: more is taken for a
// corrupt reply.
const maxColumns = 4096

// Query runs one statement and reads its whole reply, returning the number
// of rows received over all result sets: Exec without the rows' values.
func (c *Conn) Query(q string) (rows int, err error) {
	r, err := c.Exec(q, nil)
	return r.Rows, err
}

// Exec runs one statement (COM_QUERY) and reads its whole reply (every
// result set, as CALL sends them), reporting the rows received and the
// affected rows of the OK packet that ends it. When row is not nil it is
// called with the column values of every row received (nil for SQL NULL),
// valid only during the call; an error it returns is returned by Exec after
// the reply has been read to its end, so the connection stays usable. An
// ERR reply is a *mysqlwire.SQLError and leaves the connection usable; any
// other error leaves it broken.
//
// Exec is the lean path: once its buffers have grown to the largest
// statement and packet seen, it allocates nothing but what an ERR reply
// costs. It decodes only what it reports; ReadResults decodes everything.
func (c *Conn) Exec(q string, row func(cols [][]byte) error) (Reply, error) {
	var r Reply
	var rowErr error
	c.cmd = append(append(c.cmd[:0], ComQuery), q...)
	if err := c.Command(c.cmd); err != nil {
		return r, err
	}
	track := c.Caps&CapSessionTrack != 0
	noEOF := c.Caps&CapDeprecateEOF != 0
	for {
		p, err := c.next()
		if err != nil {
			return r, err
		}
		switch p[0] {
		case mysqlwire.HeaderOK:
			ok, good := mysqlwire.ParseOK(p, track)
			if !good {
				return r, fmt.Errorf("%w: OK packet", ErrProtocol)
			}
			r.Affected = ok.AffectedRows
			if ok.Status&mysqlwire.StatusMoreResults == 0 {
				return r, rowErr
			}
			continue
		case mysqlwire.HeaderErr:
			return r, mysqlwire.ParseErr(p)
		case mysqlwire.HeaderLocalInfile:
			return r, errors.New("rawmysql: LOAD DATA LOCAL request refused")
		}
		ncols, _, null, good := mysqlwire.ReadLenEnc(p)
		if !good || null || ncols == 0 || ncols > maxColumns {
			return r, fmt.Errorf("%w: column count", ErrProtocol)
		}
		for range ncols {
			if _, err := c.next(); err != nil {
				return r, err
			}
		}
		if !noEOF {
			if p, err = c.next(); err != nil {
				return r, err
			}
			if !mysqlwire.IsEOF(p[0], len(p)) {
				return r, fmt.Errorf("%w: no EOF after column definitions", ErrProtocol)
			}
		}
		more := false
	readRows:
		for {
			p, err := c.next()
			if err != nil {
				return r, err
			}
			switch {
			case p[0] == mysqlwire.HeaderErr:
				return r, mysqlwire.ParseErr(p)
			case !noEOF && mysqlwire.IsEOF(p[0], len(p)):
				_, st := mysqlwire.EOFStatus(p)
				more = st&mysqlwire.StatusMoreResults != 0
				break readRows
			case noEOF && p[0] == mysqlwire.HeaderEOF && len(p) < mysqlwire.MaxPayload:
				ok, good := mysqlwire.ParseOK(p, track)
				if !good {
					return r, fmt.Errorf("%w: result set terminator", ErrProtocol)
				}
				more = ok.Status&mysqlwire.StatusMoreResults != 0
				break readRows
			}
			r.Rows++
			if row == nil || rowErr != nil {
				continue
			}
			if c.cols, err = parseTextRow(c.cols[:0], p, int(ncols)); err != nil {
				return r, err
			}
			rowErr = row(c.cols)
		}
		if !more {
			return r, rowErr
		}
	}
}

// next reads one packet into the connection's reused buffer; it is valid
// until the next read.
func (c *Conn) next() ([]byte, error) {
	var err error
	c.buf, err = c.readPacket(c.buf)
	return c.buf, err
}

// parseTextRow splits text-protocol row p into exactly ncols values,
// appended to dst (nil for NULL); the values alias p.
func parseTextRow(dst [][]byte, p []byte, ncols int) ([][]byte, error) {
	start := len(dst)
	dst, ok := mysqlwire.ParseTextRow(dst, p)
	switch {
	case !ok:
		return dst, fmt.Errorf("%w: column %d of a row", ErrProtocol, len(dst)-start+1)
	case len(dst)-start != ncols:
		return dst, fmt.Errorf("%w: row of %d columns, want %d", ErrProtocol, len(dst)-start, ncols)
	}
	return dst, nil
}
