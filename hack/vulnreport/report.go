package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// message is one object of govulncheck's -format json stream (the fields
// read here).
type message struct {
	Config *struct {
		GoVersion string `json:"go_version"`
		DB        string `json:"db"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
}

// vuln is a vulnerability meshlet's code reaches: a finding whose trace
// goes down to a function.
type vuln struct {
	id, summary, module, version, fixed string
	via                                 string // meshlet's function that reaches it
}

// report is what a scan found.
type report struct {
	goVersion string
	db        string
	modules   []vuln // in third-party modules: fail the check
	stdlib    []vuln // in the Go toolchain's standard library
}

// read collects the reached vulnerabilities of a govulncheck JSON stream.
func read(r io.Reader) (*report, error) {
	rep := &report{}
	summaries := map[string]string{}
	reached := map[string]vuln{}
	dec := json.NewDecoder(r)
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("govulncheck output: %w", err)
		}
		switch {
		case m.Config != nil:
			rep.goVersion, rep.db = m.Config.GoVersion, m.Config.DB
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil:
			f := m.Finding
			if len(f.Trace) == 0 || f.Trace[0].Function == "" {
				continue // a module or package is imported, no vulnerable symbol is called
			}
			v := vuln{id: f.OSV, module: f.Trace[0].Module, version: f.Trace[0].Version, fixed: f.FixedVersion}
			if last := f.Trace[len(f.Trace)-1]; last.Module != v.module {
				v.via = symbol(last)
			}
			if _, seen := reached[v.id+" "+v.module]; !seen || reached[v.id+" "+v.module].via == "" {
				reached[v.id+" "+v.module] = v
			}
		}
	}
	if rep.goVersion == "" {
		return nil, errors.New("govulncheck output has no config message: did it run?")
	}
	for _, v := range reached {
		v.summary = summaries[v.id]
		if v.module == "stdlib" || v.module == "toolchain" {
			rep.stdlib = append(rep.stdlib, v)
		} else {
			rep.modules = append(rep.modules, v)
		}
	}
	byID := func(a, b vuln) int { return strings.Compare(a.id+a.module, b.id+b.module) }
	slices.SortFunc(rep.modules, byID)
	slices.SortFunc(rep.stdlib, byID)
	return rep, nil
}

func symbol(f frame) string {
	if f.Receiver != "" {
		return fmt.Sprintf("%s.%s.%s", f.Package, strings.TrimPrefix(f.Receiver, "*"), f.Function)
	}
	return f.Package + "." + f.Function
}

// write prints the report; false when a third-party module's
// vulnerability is reached (a go get fixes it, so it fails the check).
// Standard-library ones are printed as a warning: they are fixed by
// building with a newer Go, which is the machine's, not the module's.
func (r *report) write(w io.Writer) bool {
	line := func(v vuln) {
		fmt.Fprintf(w, "  %s %s@%s (fixed in %s): %s\n", v.id, v.module, v.version, v.fixed, v.summary)
		if v.via != "" {
			fmt.Fprintf(w, "      reached from %s\n", v.via)
		}
	}
	if len(r.modules) > 0 {
		fmt.Fprintf(w, "vulncheck: meshlet's code reaches %d known vulnerabilities in the modules it requires (database %s); upgrade them:\n", len(r.modules), r.db)
		for _, v := range r.modules {
			line(v)
		}
	}
	if len(r.stdlib) > 0 {
		fmt.Fprintf(w, "vulncheck: warning: meshlet's code reaches %d known vulnerabilities in the standard library of %s, this machine's Go; build releases with a Go that has the fixes:\n", len(r.stdlib), r.goVersion)
		for _, v := range r.stdlib {
			line(v)
		}
	}
	if len(r.modules) == 0 {
		fmt.Fprintf(w, "vulncheck: no known vulnerability reached in the required modules (database %s)\n", r.db)
	}
	return len(r.modules) == 0
}
