// Command passthrough is the smallest chained CNI plugin a Go program can
// be: ADD prints the previous result, everything else prints nothing. The
// chain benchmark runs it where meshlet-cni would run, to show what any Go
// plugin costs a pod's ADD on the machine (process start included), apart
// from what meshlet-cni does.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		fmt.Print(`{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return
	}
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(1)
	}
	var conf struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		os.Exit(1)
	}
	if os.Getenv("CNI_COMMAND") == "ADD" {
		os.Stdout.Write(conf.PrevResult)
	}
}
