package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshlet/meshlet/agent/nodesettings"
	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/meshlet/meshlet/internal/strictjson"
)

// FileName, in --state-dir, holds each --config-map's last good
// NodeSettings document: a restarted meshlet applies them until it reads
// the ConfigMaps again, and keeps them for a ConfigMap whose document has
// since become invalid.
const (
	FileName     = "node-settings.json"
	stateVersion = 1
)

type savedState struct {
	Version int `json:"version"`
	// Documents are keyed by NAMESPACE/NAME.
	Documents map[string]*nodesettings.Document `json:"documents"`
}

// Load returns the saved documents; none when there is no
// file. A file that cannot be used is an error (and no documents).
func Load(dir string) (map[string]*nodesettings.Document, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var st savedState
	if err := strictjson.Decode(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", path, st.Version, stateVersion)
	}
	for ref, d := range st.Documents {
		if d == nil {
			return nil, fmt.Errorf("%s: documents[%s]: null", path, ref)
		}
		if err := d.Validate().ToAggregate(); err != nil {
			return nil, fmt.Errorf("%s: documents[%s]: %w", path, ref, err)
		}
	}
	return st.Documents, nil
}

// save writes the sources' last good documents (temporary
// file, then rename).
func save(dir string, sources []*configMapSource) error {
	st := savedState{Version: stateVersion, Documents: map[string]*nodesettings.Document{}}
	for _, src := range sources {
		if src.good != nil {
			st.Documents[src.ref.String()] = src.good
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", FileName, err)
	}
	if err := atomicfile.Write(dir, FileName, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, FileName), err)
	}
	return nil
}
