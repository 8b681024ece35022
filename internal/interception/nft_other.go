//go:build !linux

package interception

import "errors"

// Install is Linux only: the rules are nf_tables rules.
func Install(r Rules) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return errors.New("transparent interception needs Linux (nf_tables)")
}
