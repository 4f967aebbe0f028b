// Package narrate is how the demos tell what happens: a "==>" line for
// each step, indented blocks for what the node shows (rules, conflists,
// metrics), errors on their own stream. make demo writes to the terminal;
// the demos' tests to a buffer they check.
package narrate

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Narrator writes a demo's story to out and its errors to errs.
type Narrator struct {
	name      string
	out, errs io.Writer
}

// New returns the narrator of the demo called name.
func New(name string, out, errs io.Writer) *Narrator {
	return &Narrator{name: name, out: out, errs: errs}
}

// Say tells one step.
func (n *Narrator) Say(format string, args ...any) { fmt.Fprintf(n.out, "==> "+format+"\n", args...) }

// Printf, Println and Print write as fmt's do, to the story.
func (n *Narrator) Printf(format string, args ...any) { fmt.Fprintf(n.out, format, args...) }
func (n *Narrator) Println(args ...any)               { fmt.Fprintln(n.out, args...) }
func (n *Narrator) Print(args ...any)                 { fmt.Fprint(n.out, args...) }

// File shows the file at path, indented.
func (n *Narrator) File(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(n.out, "    ", err)
		return
	}
	fmt.Fprint(n.out, Indent(string(b)))
}

// Errorln writes an error line, prefixed with the demo's name.
func (n *Narrator) Errorln(args ...any) {
	fmt.Fprintln(n.errs, append([]any{n.name + ":"}, args...)...)
}

// Errorf writes an error, as is.
func (n *Narrator) Errorf(format string, args ...any) { fmt.Fprintf(n.errs, format, args...) }

// Indent indents every line of s by four spaces.
func Indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// Head is the first n lines of s, with an ellipsis if there were more.
func Head(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

// LastLine is the last line of s, at most 400 bytes of it.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}
