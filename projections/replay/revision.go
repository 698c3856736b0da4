package replay

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRevision reads a revision against a run's last revision: N
// (1..last), "last", or "last-K". Empty means def. The CLI's --at and
// --diff and the view's ?at= read revisions so.
func ParseRevision(s string, last, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	var rev int64
	switch {
	case s == "last":
		rev = last
	case strings.HasPrefix(s, "last-"):
		k, err := strconv.ParseInt(s[len("last-"):], 10, 64)
		if err != nil || k < 0 {
			return 0, fmt.Errorf("%q: want N, last or last-K", s)
		}
		rev = last - k
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q: want N, last or last-K", s)
		}
		rev = n
	}
	if rev < 1 || rev > last {
		return 0, fmt.Errorf("%q: the run has revisions 1-%d", s, last)
	}
	return rev, nil
}
