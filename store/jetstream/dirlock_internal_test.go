package jetstream

import "testing"

// A holder is named by its program and its subcommand, never by flags
// that may carry a secret.
func TestHolderCommandKeepsNoFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/usr/local/bin/node", "serve", "--token", "s3cret"}, "node serve"},
		{[]string{"./node", "--token=s3cret", "serve"}, "node"},
		{[]string{"/tmp/x/node.test", "-test.run=X"}, "node.test"},
		{nil, "?"},
	} {
		if got := command(tc.args); got != tc.want {
			t.Errorf("command(%q) = %q; want %q", tc.args, got, tc.want)
		}
	}
}
