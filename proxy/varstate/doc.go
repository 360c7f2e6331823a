// Package varstate holds a client session's system variables as plain
// values, in the way PgBouncer's varcache does: what the client set
// (State), what a backend connection has (another State), the SET that
// moves a connection from one to the other and nothing more (RestoreSQL),
// which variables the backend's session tracker reports and what becomes
// of each (Class: restored, kept by holdfast, recorded, or pinning; Report,
// from an OK packet's session state information), the variables holdfast
// keeps for the client itself (KeptVars) and what a client's tracking
// settings let it be told (Filter), and each backend's base values (Base).
//
// It is pure: no I/O, no sessions, no pools. The proxy reads values from
// connections and sends the SQL built here; everything here is tested
// without a database.
package varstate
