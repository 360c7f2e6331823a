package proxy

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Values of the session's own last statement (LAST_INSERT_ID(),
// @@identity, @@last_insert_id, ROW_COUNT()) live on the backend
// connection that ran it, which is back in the pool and may have run
// another client's statement since. holdfast keeps the client's values
// (sessionState.lastInsertID, rowCount) and answers a SELECT of one of
// them itself (policy.AnswerLocal, answerLocal).

// The columns of @@identity / @@last_insert_id and ROW_COUNT() as MariaDB
// describes them (LAST_INSERT_ID()'s is lastInsertIDCol).
func identityCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21, Flags: mysql.UNSIGNED_FLAG | mysql.BINARY_FLAG}
}

func rowCountCol(name string) mysqlwire.Column {
	return mysqlwire.Column{Name: name, Type: mysql.MYSQL_TYPE_LONGLONG, Length: 21, Flags: mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}
