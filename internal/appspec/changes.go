package appspec

import "github.com/hoard-io/hoard/internal/cacheconfig"

// changesMode is c.StoreChanges as the cachelet's setting; a value that
// does not parse is passed on as it is, for Validate to refuse.
func (c CacheSpec) changesMode() cacheconfig.ChangesMode {
	m, err := cacheconfig.ParseChangesMode(c.StoreChanges)
	if err != nil {
		return cacheconfig.ChangesMode(c.StoreChanges)
	}
	return m
}

// FollowsRelay reports whether the application's cachelets follow the
// store's changes through the controller's relay (store_changes relay or
// auto, which is relay on the platform): the controller then has the
// store notify it of its buckets' changes.
func (c CacheSpec) FollowsRelay() bool {
	return c.changesMode().Resolve(true) == cacheconfig.ChangesRelay
}

// finalOutputs is c.FinalOutputs as the cachelet's locations.
func (c CacheSpec) finalOutputs() []cacheconfig.Location {
	var out []cacheconfig.Location
	for _, l := range c.FinalOutputs {
		out = append(out, cacheconfig.Location{Bucket: l.Bucket, Prefix: l.Prefix})
	}
	return out
}
