// Package strictjson decodes a JSON message from another process the way
// meshlet's wires want it: no unknown field, no field given twice (which
// encoding/json would quietly resolve to the last), nothing after the
// value. It takes the standard library only: the small binaries
// (meshlet-cni, meshlet-gate) link it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// RepeatedFieldError names a field an object gives twice.
type RepeatedFieldError struct{ Field string }

func (e *RepeatedFieldError) Error() string { return fmt.Sprintf("%s: given twice", e.Field) }

// ErrTrailingData: something follows the value.
var ErrTrailingData = errors.New("data after the JSON value")

// Decode decodes b into v strictly. A repeated field is a
// *RepeatedFieldError; data after the value is ErrTrailingData; anything
// else is encoding/json's error.
func Decode(b []byte, v any) error {
	if err := noRepeatedFields(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Not dec.More(): it is false before a stray '}' or ']'.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailingData
	}
	return nil
}

// noRepeatedFields refuses an object (at any depth) that names a field
// twice. A malformed document passes: the decoder reports it.
func noRepeatedFields(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if k, ok := tok.(string); ok {
				if top.seen[k] {
					return &RepeatedFieldError{Field: k}
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true // a value ended: a key comes next
			}
			continue
		}
		if top != nil && top.object {
			top.key = true // a value ends: a key comes next
		}
	}
}
