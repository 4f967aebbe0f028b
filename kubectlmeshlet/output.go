package kubectlmeshlet

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// checkOutput refuses an -o kubectl-meshlet does not print.
func checkOutput(output string) error {
	switch output {
	case "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("-o %q: want table, json or yaml", output)
}

// printObject prints v as JSON (indented) or YAML.
func printObject(w io.Writer, output string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", output, err)
	}
	if output == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
	} else {
		b = append(b, '\n')
	}
	_, err = w.Write(b)
	return err
}
