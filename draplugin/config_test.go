package draplugin

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	ok := []func(*Config){
		func(c *Config) { c.Slots = 0 },
		func(c *Config) { c.Slots = 1 },
		func(c *Config) { c.Slots = MaxSlots },
		func(c *Config) { c.DriverName = "mesh.example.com" },
		func(c *Config) { c.KubeletRootDir = "/data/kubelet" },
		func(c *Config) { c.PodUID = "0c5f6a4e-1b2d-4c3e-9f8a-7b6c5d4e3f21" },
		// Disabled: nothing is checked.
		func(c *Config) { c.Enabled, c.DriverName, c.Slots = false, "Not A Name", -1 },
	}
	for i, mut := range ok {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("ok[%d] %+v refused: %v", i, c, err)
		}
	}

	bad := map[string]struct {
		mut  func(*Config)
		flag string
	}{
		"empty driver name":      {func(c *Config) { c.DriverName = "" }, "--dra-driver-name"},
		"upper-case driver name": {func(c *Config) { c.DriverName = "Mesh.meshlet.dev" }, "--dra-driver-name"},
		"driver name with slash": {func(c *Config) { c.DriverName = "mesh/meshlet" }, "--dra-driver-name"},
		"driver name too long":   {func(c *Config) { c.DriverName = strings.Repeat("a", 60) + ".dev" }, "--dra-driver-name"},
		"relative root dir":      {func(c *Config) { c.KubeletRootDir = "var/lib/kubelet" }, "--kubelet-root-dir"},
		"empty root dir":         {func(c *Config) { c.KubeletRootDir = "" }, "--kubelet-root-dir"},
		"slots -1":               {func(c *Config) { c.Slots = -1 }, "--dra-slots=-1"},
		"slots 129":              {func(c *Config) { c.Slots = 129 }, "--dra-slots=129"},
		"pod uid":                {func(c *Config) { c.PodUID = "not a uid!" }, "--pod-uid"},
	}
	for name, b := range bad {
		c := DefaultConfig()
		b.mut(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), b.flag) {
			t.Errorf("%s: error %q does not start with the flag %s", name, err, b.flag)
		}
		// New refuses it too, before looking at its dependencies.
		if _, err := New(c, Deps{}); err == nil || !strings.Contains(err.Error(), b.flag) {
			t.Errorf("%s: New = %v, want the config error", name, err)
		}
	}
	if _, err := New(DefaultConfig(), Deps{}); err == nil || !strings.Contains(err.Error(), "missing dependency") {
		t.Errorf("New without dependencies = %v", err)
	}
}
