// Package flagvalue holds the flag.Values meshlet's settings share, so
// that each setting does not hand-write its own parsing and error message:
// Enum, a string type that takes one of a fixed set of values, and List,
// a comma-separated list.
package flagvalue

import (
	"fmt"
	"strings"
)

// Enum sets *dst to one of the allowed values. Matching ignores case (a
// DaemonSet's MESHLET_REDIRECT_BACKEND=NFTables means nftables); *dst
// always receives the allowed value's own spelling.
type Enum[T ~string] struct {
	dst     *T
	what    string
	allowed []T
}

// NewEnum returns an Enum for dst. what names the setting in errors
// ("redirect backend": unknown redirect backend "x" (want nftables or
// iptables)).
func NewEnum[T ~string](dst *T, what string, allowed ...T) *Enum[T] {
	return &Enum[T]{dst: dst, what: what, allowed: allowed}
}

// Set implements flag.Value. An unknown value leaves *dst unchanged.
func (v *Enum[T]) Set(s string) error {
	for _, a := range v.allowed {
		if strings.EqualFold(s, string(a)) {
			*v.dst = a
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q (want %s)", v.what, s, list(v.allowed))
}

// String implements flag.Value. The flag package calls it on a zero Enum
// to detect defaults, hence the nil check.
func (v *Enum[T]) String() string {
	if v == nil || v.dst == nil {
		return ""
	}
	return string(*v.dst)
}

// list spells the allowed values as prose: "a", "a or b", "a, b or c".
func list[T ~string](allowed []T) string {
	var b strings.Builder
	for i, a := range allowed {
		switch {
		case i == 0:
		case i == len(allowed)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(string(a))
	}
	return b.String()
}
