package strictjson

import (
	"errors"
	"testing"

	"github.com/meshlet/meshlet/internal/importcheck"
)

type msg struct {
	A string         `json:"a"`
	B []inner        `json:"b"`
	C map[string]int `json:"c"`
}

type inner struct {
	X int `json:"x"`
}

// TestDecode: what encoding/json lets through quietly is refused, naming
// why; a strict message passes.
func TestDecode(t *testing.T) {
	var repeated *RepeatedFieldError
	for in, want := range map[string]func(error) bool{
		`{"a":"x","b":[{"x":1},{"x":2}],"c":{"k":1}}`: func(err error) bool { return err == nil },
		`{"a":"x","a":""}`:                            func(err error) bool { return errors.As(err, &repeated) && repeated.Field == "a" },
		`{"b":[{"x":1,"x":2}]}`:                       func(err error) bool { return errors.As(err, &repeated) && repeated.Field == "x" },
		`{"c":{"k":1},"b":[],"c":{}}`:                 func(err error) bool { return errors.As(err, &repeated) && repeated.Field == "c" },
		`{"c":{"k":1,"k":2}}`:                         func(err error) bool { return errors.As(err, &repeated) && repeated.Field == "k" },
		`{"b":[{"x":1}],"a":"x"}`:                     func(err error) bool { return err == nil },
		`{"a":"x"}}`:                                  func(err error) bool { return errors.Is(err, ErrTrailingData) },
		`{"a":"x"}] garbage`:                          func(err error) bool { return errors.Is(err, ErrTrailingData) },
		`{"a":"x"} {}`:                                func(err error) bool { return errors.Is(err, ErrTrailingData) },
		`{"d":1}`:                                     func(err error) bool { return err != nil && err.Error() == `json: unknown field "d"` },
		`{"a":`:                                       func(err error) bool { return err != nil },
	} {
		var m msg
		if err := Decode([]byte(in), &m); !want(err) {
			t.Errorf("%s: %v", in, err)
		}
	}
}

func TestStandardLibraryOnly(t *testing.T) {
	importcheck.StandardLibraryOnly(t, "the small binaries link it")
}
