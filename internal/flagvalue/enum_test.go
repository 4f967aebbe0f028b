package flagvalue_test

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/internal/flagvalue"
)

type color string

const (
	red   color = "red"
	green color = "green"
	blue  color = "blue"
)

func TestSetAcceptsAllowedValuesInTheirOwnSpelling(t *testing.T) {
	for in, want := range map[string]color{"red": red, "GREEN": green, "Blue": blue} {
		c := red
		if err := flagvalue.NewEnum(&c, "color", red, green, blue).Set(in); err != nil || c != want {
			t.Errorf("Set(%q): %q, %v; want %q", in, c, err, want)
		}
	}
}

func TestSetRefusesUnknownValueNamingTheAllowedOnes(t *testing.T) {
	for _, c := range []struct {
		allowed []color
		want    string
	}{
		{[]color{red}, `unknown color "teal" (want red)`},
		{[]color{red, green}, `unknown color "teal" (want red or green)`},
		{[]color{red, green, blue}, `unknown color "teal" (want red, green or blue)`},
	} {
		got := green
		err := flagvalue.NewEnum(&got, "color", c.allowed...).Set("teal")
		if err == nil || err.Error() != c.want {
			t.Errorf("error %v, want %q", err, c.want)
		}
		if got != green {
			t.Errorf("a refused value changed the destination to %q", got)
		}
	}
}

func TestAsFlag(t *testing.T) {
	c := blue
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Var(flagvalue.NewEnum(&c, "color", red, green, blue), "color", "a color")
	fs.PrintDefaults()
	if !strings.Contains(out.String(), `(default blue)`) {
		t.Errorf("usage %q does not show the default", out.String())
	}
	if err := fs.Parse([]string{"--color=red"}); err != nil || c != red {
		t.Fatalf("--color=red: %q, %v", c, err)
	}
	out.Reset()
	if err := fs.Parse([]string{"--color=teal"}); err == nil || !strings.Contains(out.String(), "want red, green or blue") {
		t.Fatalf("--color=teal: %v, output %q", err, out.String())
	}
}
