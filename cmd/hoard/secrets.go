package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
)

// secretsFlag registers --secrets: a JSON file, readable by its owner only
// (0600), whose keys are the names of fs's flags that carry secrets and
// whose values those flags take unless the command line gives them. It
// keeps tokens and keys off command lines and out of environments, where
// other processes could read them. allowed names the flags it may set.
func secretsFlag(fs *flag.FlagSet, allowed ...string) func() error {
	path := fs.String("secrets", "", fmt.Sprintf("a JSON file (mode 0600) of secrets by flag name (%v), for flags the command line does not give", allowed))
	return func() error {
		if *path == "" {
			return nil
		}
		return applySecrets(fs, *path, allowed)
	}
}

// applySecrets sets, from the secrets file at path, every allowed flag of
// fs that the command line did not set. fs must have been parsed. A file
// others may read, an unknown key or a value the flag refuses is an error
// naming the file; nothing is set then.
func applySecrets(fs *flag.FlagSet, path string, allowed []string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: --secrets: %v", errUsage, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: --secrets: %v", errUsage, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: --secrets: %s is %v; it must be readable by its owner only (0600)", errUsage, path, st.Mode().Perm())
	}
	var secrets map[string]string
	dec := json.NewDecoder(f)
	if err := dec.Decode(&secrets); err != nil {
		return fmt.Errorf("%w: --secrets: %s: %v", errUsage, path, err)
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for name := range secrets {
		if !slices.Contains(allowed, name) {
			return fmt.Errorf("%w: --secrets: %s: unknown key %q (known: %v)", errUsage, path, name, allowed)
		}
	}
	for name, value := range secrets {
		if given[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("%w: --secrets: %s: %s: %v", errUsage, path, name, err)
		}
	}
	return nil
}
