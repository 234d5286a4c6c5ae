// Package predict predicts an invocation's peak memory (OFC §5): per
// function, a decision tree classifies the invocation's features into one
// of the memory intervals (16 MiB wide in [0, 2 GiB] by default), trained
// by CART on the invocations observed, and trusted only once mature (at
// least 100 invocations, 90% of the held-out recent ones predicted exactly
// or over, and at least half of the under-predictions within one
// interval). A mature prediction is used one interval above the predicted
// one.
//
// The package is pure: no I/O and no goroutines. A Model predicts
// (safe for concurrent use, no allocation); a Trainer keeps the bounded
// training set of one function and retrains when asked (its caller owns
// its lock). Both serialise to JSON and are validated when decoded, since
// what is read back from etcd is not trusted (ADR 0024).
package predict

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Limits on features, so that what an event carries cannot grow a model
// or a training set without bound.
const (
	// MaxFeatures is the most features one invocation contributes.
	MaxFeatures = 32
	// MaxNameLen is the longest feature name kept.
	MaxNameLen = 64
	// MaxCategoryLen is the longest categorical value kept (longer ones
	// are cut).
	MaxCategoryLen = 64
	// MaxCategories is the most distinct values a categorical feature
	// takes in a model; values past it are unknown to the model (a doubt).
	MaxCategories = 256
)

// Feature is one named feature of an invocation: a number (an argument,
// an input's size, an image's pixels) or a category (an argument that is
// a string or a boolean).
type Feature struct {
	Name string
	// Cat says the feature is categorical: Str holds it, Num is unused.
	Cat bool
	Num float64
	Str string
}

// Features are one invocation's features. Order does not matter; a name
// appears once (Normalize keeps the first).
type Features []Feature

// Num is a numeric feature.
func Num(name string, v float64) Feature { return Feature{Name: name, Num: v} }

// Cat is a categorical feature.
func Cat(name, v string) Feature { return Feature{Name: name, Cat: true, Str: v} }

// ErrBadFeature is returned for a feature that cannot be used: an empty
// or over-long name, or a number that is not finite.
var ErrBadFeature = errors.New("predict: bad feature")

// Normalize returns fs checked and bounded: names validated, categories
// cut to MaxCategoryLen, duplicates dropped (the first kept), at most
// MaxFeatures (the first by name order), sorted by name. It does not
// modify fs.
func Normalize(fs Features) (Features, error) {
	out := make(Features, 0, min(len(fs), MaxFeatures))
	seen := make(map[string]bool, len(fs))
	for _, f := range fs {
		if f.Name == "" || len(f.Name) > MaxNameLen || strings.ContainsAny(f.Name, "\x00\n") {
			return nil, fmt.Errorf("%w: name %q", ErrBadFeature, f.Name)
		}
		if !f.Cat && (math.IsNaN(f.Num) || math.IsInf(f.Num, 0)) {
			return nil, fmt.Errorf("%w: %s is not a finite number", ErrBadFeature, f.Name)
		}
		if seen[f.Name] {
			continue
		}
		seen[f.Name] = true
		if f.Cat {
			if len(f.Str) > MaxCategoryLen {
				f.Str = f.Str[:MaxCategoryLen]
			}
			f.Num = 0
		} else {
			f.Str = ""
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) > MaxFeatures {
		out = out[:MaxFeatures]
	}
	return out, nil
}

// Interval is how memory maps to classes: class k is the interval
// (k·Width, (k+1)·Width], k in [0, Classes()).
type Interval struct {
	Width int64 // bytes; 16 MiB by default
	Max   int64 // bytes; 2 GiB by default
}

// DefaultInterval is OFC's: 16 MiB intervals in [0, 2 GiB].
var DefaultInterval = Interval{Width: 16 << 20, Max: 2 << 30}

// Validate checks the interval: a positive width, a maximum of at least
// one width and at most 4,096 classes.
func (iv Interval) Validate() error {
	if iv.Width <= 0 || iv.Max < iv.Width {
		return fmt.Errorf("predict: interval width %d and maximum %d: want 0 < width <= maximum", iv.Width, iv.Max)
	}
	if iv.Max/iv.Width > 4096 {
		return fmt.Errorf("predict: %d intervals of %d bytes up to %d: at most 4096", iv.Max/iv.Width, iv.Width, iv.Max)
	}
	return nil
}

// Classes is how many intervals there are.
func (iv Interval) Classes() int { return int((iv.Max + iv.Width - 1) / iv.Width) }

// Class is the interval that holds peak bytes (the last one for anything
// at or above Max).
func (iv Interval) Class(peak int64) int {
	if peak <= 0 {
		return 0
	}
	k := int((peak - 1) / iv.Width)
	return min(k, iv.Classes()-1)
}

// Upper is class k's upper bound in bytes, the memory to give an
// invocation predicted in it.
func (iv Interval) Upper(k int) int64 { return min(int64(k+1)*iv.Width, iv.Max) }
