package appspec

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Sweep is cache.sweep: a positive duration, or off (also 0). The zero
// value, the field left out, is the cachelet's default (OFC's 300s).
type Sweep struct {
	Off   bool
	Every Duration
}

// UnmarshalYAML reads a duration or off.
func (s *Sweep) UnmarshalYAML(n *yaml.Node) error {
	v := strings.ToLower(strings.TrimSpace(n.Value))
	if n.Kind == yaml.ScalarNode && (v == "off" || v == "false" || v == "0" || v == "0s") {
		*s = Sweep{Off: true}
		return nil
	}
	d, err := time.ParseDuration(v)
	if n.Kind != yaml.ScalarNode || err != nil || d <= 0 {
		return fmt.Errorf("line %d: cache.sweep: bad value %q (want a duration such as 300s, or off)", n.Line, n.Value)
	}
	*s = Sweep{Every: Duration(d)}
	return nil
}

// MarshalYAML writes off or the duration.
func (s Sweep) MarshalYAML() (any, error) {
	if s.Off {
		return "off", nil
	}
	return time.Duration(s.Every).String(), nil
}

// IsZero reports the default (the field left out).
func (s Sweep) IsZero() bool { return s == Sweep{} }
