package proxy

import (
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// holdfast's own tables are holdfast's: a client statement may read them,
// never write, lock or alter them (error 9009). The statement path pays
// one cheap test per word for it (sqlscan.Info.NamesProtected); only the
// texts that name one of the tables, or run statement text of their own
// (EXECUTE IMMEDIATE, PREPARE ... FROM), are looked at again. The same
// texts are where a KILL can hide from the translation of its ids (see
// killIn in kill.go).

// ProtectTables makes the tables of schema holdfast's: client statements
// that write, lock or alter one of them are refused with error 9009 (see
// sqlscan.Mode.CheckProtected for what counts). Unqualified names resolve
// in each session's current database. It replaces the tables protected
// before; an empty schema or no tables protects nothing, as before the
// first call. Safe to call at any time: statements already prepared are
// checked again at their next execute.
func (s *Server) ProtectTables(schema string, tables []string) {
	s.protected.Store(sqlscan.NewProtected(schema, tables))
}

// protectedErr is error 9009 for a text refused as r says.
func protectedErr(r sqlscan.Refusal) *mysqlwire.SQLError {
	const instead = "Change the engine's data with CALL holdfast.* and on-call controls with holdfastctl or the admin API."
	in := ""
	if r.Dynamic {
		in = " (in the statement text of EXECUTE IMMEDIATE or PREPARE)"
	}
	table := "`" + r.Schema + "`.`" + r.Table + "`"
	switch {
	case r.Table == "":
		return newErr(codeProtected, "42000", "holdfast: `%s` is holdfast's own schema; a client statement may not drop it%s. %s", r.Schema, in, instead)
	case r.Unsure:
		return newErr(codeProtected, "42000", "holdfast: the statement names holdfast's own table %s%s in %s, where holdfast cannot tell whether it only reads it; a client statement may read holdfast's tables but not write, lock or alter them. %s", table, in, r.Where, instead)
	}
	return newErr(codeProtected, "42000", "holdfast: %s is one of holdfast's own tables: a client statement may read it but not write, lock or alter it, nor read it in a statement that writes%s. %s", table, in, instead)
}

// refuseProtected answers a text to prepare that writes, locks or alters one of
// holdfast's tables with error 9009 and reports whether it did.
func (s *session) refuseProtected(mode sqlscan.Mode, sql []byte, info *sqlscan.Info, prot *sqlscan.Protected, db string) bool {
	if prot == nil || !plan.MayWriteProtected(info) {
		return false
	}
	if r, refused := mode.CheckProtected(sql, prot, db); refused {
		s.writeErr(protectedErr(r))
		return true
	}
	return false
}
