package main

import (
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/reservation"
)

// holdfastTables are holdfast's own tables: the engine's ledger and
// records, the schema's migration log, the authority switch and the
// fleet's controls, members, cap grants and duties. Client statements
// may read them, never write, lock or alter them (error 9009).
var holdfastTables = []string{
	reservation.TableLedger, reservation.TableUnits, reservation.TableReserved, reservation.TableReservations,
	reservation.TableCounters, reservation.TableReturns, reservation.TableMigrations,
	reservation.TableAuthority, reservation.TableRedisState,
	reservation.TableControls, reservation.TableMembers, reservation.TableGrants, reservation.TableDuties,
}

// protectTables has srv refuse client writes to holdfast's tables in
// schema, where they are now (tables.go follows them there).
func protectTables(srv *proxy.Server, schema string) {
	srv.ProtectTables(schema, holdfastTables)
}
