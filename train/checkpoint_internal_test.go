package train

import (
	"encoding/json"
	"os"
)

// RewriteManifestForTest makes a checkpoint's manifest match its files again after a test changed
// them on purpose: to test what a consistent checkpoint with bad values does.
func RewriteManifestForTest(base string) error {
	raw, err := os.ReadFile(base + manifestSuffix)
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	jsonBytes, err := os.ReadFile(base + ".json")
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(base + ".bin")
	if err != nil {
		return err
	}
	m.JSONSHA, m.BinSHA, m.BinBytes = sum(jsonBytes), sum(bin), int64(len(bin))
	if raw, err = json.Marshal(m); err != nil {
		return err
	}
	return os.WriteFile(base+manifestSuffix, raw, 0o666)
}
