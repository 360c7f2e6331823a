// Package sqlscan classifies MySQL and MariaDB statement text, the payload
// of COM_QUERY, on the proxy's hot path. It owns the one lexer and its uses:
//
//   - Scan is the one pass over a statement on the hot path. It says what
//     kind of statement a text starts with, how many statements it holds,
//     which session-affecting features (user variables, temporary tables,
//     GET_LOCK, LOCK TABLES, SET forms, calls of functions that are not
//     built in, ...) appear anywhere in it, which comments mention the tag
//     key (the attribution package reads them), which kinds of session
//     variables it names, whether it is a plain BEGIN / COMMIT / ROLLBACK,
//     the routine a CALL names, and the statement's shape (the hash of its
//     digest, by which on-call blocks or caps one statement form); so the
//     proxy can decide pinning and pipelining, attribute and gate it, and
//     intercept KILL, CALL holdfast.* and SELECT LAST_INSERT_ID(). It does
//     not allocate. The digest is built as the tokens go by (digester), so
//     hashing it costs no pass of its own.
//   - What only some statements need is computed when asked, each in a
//     pass of its own over those statements only: ParseCall parses the
//     arguments of CALL holdfast.*; Split gives the statements of a text
//     that holds a KILL among others; SetVariables and StatementVariables
//     name what a SET assigns; AppendConnectionID rewrites CONNECTION_ID();
//     AppendDigest normalizes a statement for the holders view and logs;
//     CheckProtected decides whether a text that names a protected table
//     (Info.NamesProtected, from ScanProtected) writes, locks or alters it;
//     AppendDynamic reads the statement text of EXECUTE IMMEDIATE and
//     PREPARE ... FROM.
//
// It is pure: no I/O, no state, safe for concurrent use. It must never
// modify the bytes it is given, never keep a reference to them, never
// panic, and stay linear in the input length on hostile input (huge or
// unterminated comments and literals, NUL bytes, invalid UTF-8). It knows
// nothing of the wire protocol, sessions or pools: what to do with a Kind or
// Feature is the proxy's decision.
//
// # Lexing
//
// The lexer follows MySQL's defaults (see Mode for NO_BACKSLASH_ESCAPES and
// ANSI_QUOTES): '...' and "..." are strings in which a backslash or a
// doubled quote escapes; `...` is a quoted identifier with doubled backticks
// only. /* */ comments do not nest and include optimizer hints /*+ ... */;
// "--" starts a comment to the end of the line only when followed by
// whitespace, a control byte or the end of input; so does '#'. Executable
// comments, /*!, /*!50100, /*M!, /*M!100100 (up to six version digits),
// are code: their contents are lexed as statement text, whatever the
// version, and the comment ends at the first "*/" outside a literal. An
// unterminated literal or comment runs to the end of input. Keywords are
// case-insensitive whole words; a word right after '.' is never a keyword.
// Nothing inside a literal, a quoted identifier or an ordinary comment is a
// keyword, a feature or a statement separator.
//
// A '@' right after a quoted user name ('u'@'h', `u`@`h`) is an account's
// host, not a user variable; u@h with a bare name is taken as a variable,
// which errs on the side of pinning.
//
// # Limits
//
// sqlscan is a lexer, not a parser. Statements are split at every ';', also
// inside compound statements (BEGIN NOT ATOMIC ... END, stored program
// bodies). The statement after BEGIN NOT ATOMIC, THEN, ELSE, DO, LOOP,
// REPEAT or an inner BEGIN is classified for features too, so
// "BEGIN NOT ATOMIC SET @x = 1; END" reports FeatUserVarAssign; a handler
// body after DECLARE ... HANDLER FOR is not. Executable comments whose
// version is newer than the server (which the server skips) are still
// treated as code, which can only add features.
package sqlscan
