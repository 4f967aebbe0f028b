package flagvalue

import "strings"

// List is a comma-separated list flag; setting it replaces the default.
// Blank items are dropped.
type List struct{ dst *[]string }

// NewList returns a List for dst.
func NewList(dst *[]string) *List { return &List{dst: dst} }

func (l *List) String() string {
	if l == nil || l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l *List) Set(s string) error {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	*l.dst = out
	return nil
}
