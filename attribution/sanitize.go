package attribution

// AppendSanitized applies the tag rules (see the package documentation) to
// a value that did not come from a SQL comment, such as the conn_tag
// connection attribute or a user's configured default tag, and appends it
// to dst. It reports false when nothing usable remains.
func AppendSanitized(dst, value []byte) ([]byte, bool) {
	return appendLiteral(dst, value)
}
