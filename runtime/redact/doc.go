// Package redact finds secrets in text, in the forms text carries them, and
// replaces each occurrence with [REDACTED].
//
// A secret reaches a view, a log or a model in many spellings: as itself;
// JSON-escaped once or many times (a tool's result is a JSON text inside a
// transcript that is itself JSON, and a script may stringify twice); inside
// a URL, percent-encoded; in a web page, with HTML entities; as base64, the
// bytes of a field a view encodes, where it may start at any byte of the
// encoded text. A Set matches all of them:
//
//   - the secret's bytes as they are;
//   - JSON string escaping at any depth, as encoding/json writes it (<, >,
//     & as \u003c ...) and as JavaScript's JSON.stringify does (as they
//     are): each byte JSON or HTML may escape can appear as itself, or as
//     any number of backslashes followed by its escape (\", \\, \n,
//     \u003c or \u003C, \x1b as Go's %q writes control bytes);
//   - percent-encoding, with either case of hex and + for a space, the
//     backslashes of a JSON escape percent-encoded too (%5C);
//   - HTML entities: named (&quot; &amp; &lt; &gt; &apos;), decimal
//     (&#34;, &#039;) and hex (&#x22;, &#X22;), alone or after a JSON
//     escape's backslashes;
//   - any run of whitespace (raw or escaped) where the secret has
//     whitespace, so that a newline that became \r\n or a space is still
//     the secret's;
//   - base64, standard and URL alphabets, padded or not: for each of the
//     three alignments a secret can have inside a longer encoded text, the
//     characters its bits alone decide (its stable core, at least 7
//     characters long) are replaced.
//
// Bytes outside A-Z a-z 0-9 - . _ ~ are the ones an encoding changes; the
// longest run of the others is the secret's anchor, found with
// strings.Index, and only around an anchor does the matcher run. A text
// that holds no anchor and no base64 core passes with a scan per pattern
// and no allocation.
//
// A minimal program:
//
//	set := redact.New("sk-proj-Zx81QpLm27Vb")
//	fmt.Println(set.Redact(`{"key":"sk-proj-Zx81QpLm27Vb"}`))
//	// {"key":"[REDACTED]"}
//
// The caller's duties:
//
//  1. Decide what is a secret: New takes every non-empty value it is
//     given (runtime.NewSecrets refuses placeholders and values too
//     short to be secrets, which as patterns corrupt ordinary text).
//  2. Build the Set once and share it: New compiles each secret's forms;
//     Redact is safe for concurrent use.
//  3. Redact text, not bytes that will be encoded later: a byte field
//     shown as base64 is matched by its core only, and the one or two
//     characters at its ends, whose bits the neighbouring bytes share,
//     are left.
package redact
