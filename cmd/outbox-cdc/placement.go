package main

import (
	"errors"
	"net"
	"os"
	"reflect"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/outbox-cdc/outbox-cdc/placement"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// The process's placement: section, at the top level beside connectors:
// (or beside a single connector's keys). With placement.enabled the process
// does not start every connector: it joins the deployment's placement group
// and runs the connectors the group assigns it (package placement). Every
// connector must have ha.enabled: the lock in its source database, not
// placement, keeps two replicas from streaming one connector. Placement
// without the lock is refused rather than forced on, because the lock needs
// a checkpoint every replica reaches (checkpoint.type table) and the
// operator must choose that.

// PlacementConfig is the placement: section.
type PlacementConfig struct {
	placement.Config `yaml:",inline"`
	// TLS to the placement brokers, as sink.tls.
	TLS kafka.TLSConfig `yaml:"tls"`
	// SASL authentication to the placement brokers, as sink.sasl.
	SASL kafka.SASLConfig `yaml:"sasl"`
}

// defaultPlacementConfig is off; session_timeout 0 takes the connectors'
// ha.session_timeout.
func defaultPlacementConfig() PlacementConfig {
	c := PlacementConfig{Config: placement.DefaultConfig()}
	c.SessionTimeout = 0
	return c
}

const placementEnvPrefix = "OUTBOX_CDC_PLACEMENT_"

// placementKeys are the keys under placement:, with their _file twins.
func placementKeys() keySet {
	keys := keySet{}
	keysOf(reflect.TypeOf(PlacementConfig{}), "placement", keys)
	withFileKeys(keys)
	return keys
}

// takePlacement decodes the placement: section of root (with the
// OUTBOX_CDC_PLACEMENT_* variables of env applied), removes it from root,
// and returns env without those variables: what remains is the
// connectors' configuration. Mistakes are *configError naming the key.
func takePlacement(root *yaml.Node, path string, env map[string]string) (PlacementConfig, map[string]string, error) {
	pc := defaultPlacementConfig()
	keys := placementKeys()
	rest := map[string]string{}
	mine := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, placementEnvPrefix) {
			mine[k] = v
		} else {
			rest[k] = v
		}
	}
	if len(mine) > 0 {
		if _, err := applyEnv(root, keys, mine); err != nil {
			return pc, nil, err
		}
		if err := warnUnknownEnv(mine, keys); err != nil {
			return pc, nil, err
		}
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return pc, rest, nil
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "placement" {
			continue
		}
		k, n := doc.Content[i], doc.Content[i+1]
		if n.Kind != yaml.MappingNode {
			return pc, nil, &configError{File: path, Key: "placement", Line: k.Line, Msg: "want a mapping of placement keys"}
		}
		if err := checkKeys(n, "placement", keys); err != nil {
			var ce *configError
			if errors.As(err, &ce) {
				ce.File = path
			}
			return pc, nil, err
		}
		if err := resolveFileKeys(n, "placement", keys, os.ReadFile); err != nil {
			return pc, nil, err
		}
		if err := decodeAt("placement", n, &pc); err != nil {
			return pc, nil, err
		}
		doc.Content = append(doc.Content[:i:i], doc.Content[i+2:]...)
		break
	}
	return pc, rest, nil
}

// validatePlacement derives placement.session_timeout when it is 0 and
// checks the section against the connectors: each must hold its HA lock.
func validatePlacement(p *PlacementConfig, cs []Config, listed bool) error {
	if !p.Enabled {
		return nil
	}
	for i, c := range cs {
		if !c.HA.Enabled {
			err := &configError{Key: "ha.enabled",
				Msg:  "placement.enabled needs every connector's HA lock: placement only decides which replica tries, the lock in the source database keeps two from streaming",
				Hint: "set ha.enabled: true (with checkpoint.type: table) on every connector"}
			if listed {
				return inConnector(err, i, c.Name) // connectors.go
			}
			return err
		}
	}
	if p.SessionTimeout == 0 {
		for _, c := range cs {
			p.SessionTimeout = max(p.SessionTimeout, c.HA.SessionTimeout)
		}
	}
	if err := p.Config.Validate(); err != nil {
		return sectionError("placement", err)
	}
	for _, b := range p.Brokers {
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || port == "" {
			return keyErrorf("placement.brokers", "%q is not host:port", b)
		}
	}
	if _, err := p.clientOpts(); err != nil {
		return sectionError("", err) // ClientSecurity names the keys under placement
	}
	return nil
}

// clientOpts are the TLS and SASL options of the placement client.
func (p PlacementConfig) clientOpts() ([]kgo.Opt, error) {
	return kafka.ClientSecurity("placement", p.TLS, p.SASL)
}
