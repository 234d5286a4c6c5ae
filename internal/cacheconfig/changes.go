package cacheconfig

import (
	"fmt"
	"strings"
)

// ChangesMode is Settings.StoreChanges: how a cachelet follows the
// store's change notifications to notice writers outside hoard (ADR 0028,
// ADR 0033).
type ChangesMode string

// The change-following modes; "" is off.
const (
	// ChangesOff: not followed (the default). Local reads trust their
	// copies; an outside write is not seen until the copy goes.
	ChangesOff ChangesMode = ""
	// ChangesListen: the store's own change stream (MinIO's listen API),
	// with the application's store identity.
	ChangesListen ChangesMode = "listen"
	// ChangesRelay: the platform's controller relays the store's event
	// notifications (its webhook) to the application's cachelets over
	// GET /v1/changes, with the application's platform token.
	ChangesRelay ChangesMode = "relay"
	// ChangesAuto: relay where the cachelet has a controller (the
	// platform), listen otherwise.
	ChangesAuto ChangesMode = "auto"
)

// ParseChangesMode reads off|listen|relay|auto (also false, and true for
// listen, as `hoard serve --store-changes` took before it had modes).
func ParseChangesMode(s string) (ChangesMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off", "false":
		return ChangesOff, nil
	case "listen", "true":
		return ChangesListen, nil
	case "relay":
		return ChangesRelay, nil
	case "auto":
		return ChangesAuto, nil
	}
	return "", fmt.Errorf("%w: store_changes %q: want off, listen (the store's change stream), relay (the controller's relay of the store's event notifications) or auto (relay on the platform, listen elsewhere)", ErrInvalid, s)
}

// Resolve is the mode a cachelet runs: auto becomes relay when it has a
// controller to ask, listen otherwise.
func (m ChangesMode) Resolve(hasController bool) ChangesMode {
	if m != ChangesAuto {
		return m
	}
	if hasController {
		return ChangesRelay
	}
	return ChangesListen
}

// validateChanges checks StoreChanges: a value ParseChangesMode writes.
func (s Settings) validateChanges() error {
	if m, err := ParseChangesMode(string(s.StoreChanges)); err != nil || m != s.StoreChanges {
		return fmt.Errorf("%w: store_changes %q: want off, listen, relay or auto", ErrInvalid, s.StoreChanges)
	}
	return nil
}
