package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Values of the session's own last statement (LAST_INSERT_ID(),
// @@identity, @@last_insert_id, ROW_COUNT()) live on the backend
// connection that ran it, which is back in the pool and may have run
// another client's statement since. holdfast keeps the client's values
// (sessionstate.State's LastInsertID, RowCount) and answers a SELECT of
// one of them itself, as it answers CONNECTION_ID() with its own id
// (policy.AnswerLocal).

// The columns of @@identity / @@last_insert_id and ROW_COUNT() as MariaDB
// describes them (LAST_INSERT_ID()'s is lastInsertIDCol).
func identityCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21, Flags: mysql.UNSIGNED_FLAG | mysql.BINARY_FLAG}
}

func rowCountCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21, Flags: mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}

// The columns of LAST_INSERT_ID() and CONNECTION_ID() as MariaDB and MySQL
// describe them.
func lastInsertIDCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21,
		Flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}

func connectionIDCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONG, Length: 10,
		Flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}

// answerLocal answers a statement with a value of the session's own.
func (s *session) answerLocal(v plan.Local, info *sqlscan.Info, binary bool) {
	switch v {
	case plan.ConnectionID:
		// The id clients KILL by is holdfast's, not a backend thread's.
		s.writeSingleValue(connectionIDCol(info.ConnectionIDColumn), uint64(s.id), binary)
		return
	case plan.Identity:
		s.writeSingleValue(identityCol(info.LastInsertIDColumn), s.state.LastInsertID, binary)
	case plan.LastInsertID:
		s.writeSingleValue(lastInsertIDCol(info.LastInsertIDColumn), s.state.LastInsertID, binary)
	case plan.RowCount:
		rs := resultSet{cols: []mysqlwire.Column{rowCountCol(info.RowCountColumn)}, rows: [][]any{{s.state.RowCount}}}
		s.writeResultSet(&rs, binary)
	}
	s.state.RowCount = -1 // a SELECT's
}
