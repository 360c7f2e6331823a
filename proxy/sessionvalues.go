package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Values of the session's own last statement (LAST_INSERT_ID(),
// @@identity, @@last_insert_id, ROW_COUNT()) live on the backend
// connection that ran it, which is back in the pool and may have run
// another client's statement since. holdfast keeps the client's values
// (sessionState.lastInsertID, rowCount) and answers a SELECT of one of
// them itself.

// The columns of @@identity / @@last_insert_id and ROW_COUNT() as MariaDB
// describes them (LAST_INSERT_ID()'s is lastInsertIDCol).
func identityCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21, Flags: mysql.UNSIGNED_FLAG | mysql.BINARY_FLAG}
}

func rowCountCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21, Flags: mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}

// answerSessionValue answers, from the session, a statement that is
// SELECT of one value that is the session's own (LAST_INSERT_ID(),
// @@identity, ROW_COUNT()) when no backend connection is held: a pooled
// connection holds another client's value. It reports whether it did.
func (s *session) answerSessionValue(info *sqlscan.Info, binary bool) bool {
	if s.lease.bc != nil {
		return false // the held connection ran the session's statements
	}
	switch {
	case info.LastInsertIDColumn != "" && info.LastInsertIDVar:
		s.writeSingleValue(identityCol(info.LastInsertIDColumn), s.state.lastInsertID, binary)
	case info.LastInsertIDColumn != "":
		s.writeSingleValue(lastInsertIDCol(info.LastInsertIDColumn), s.state.lastInsertID, binary)
	case info.RowCountColumn != "":
		rs := resultSet{cols: []mysqlwire.Column{rowCountCol(info.RowCountColumn)}, rows: [][]any{{s.state.rowCount}}}
		s.writeResultSet(&rs, binary)
	default:
		return false
	}
	s.state.rowCount = -1 // a SELECT's
	return true
}
