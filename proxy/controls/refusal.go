package controls

// Refusal is a statement refused by a statement-level control: the MySQL
// error the client gets. The proxy's edge writes it as an ERR packet with
// Code and State; Msg is the text a person reads, starting "holdfast: ".
type Refusal struct {
	Code  uint16
	State string // SQLSTATE, 5 characters
	Msg   string
}

func (r *Refusal) Error() string { return r.Msg }
