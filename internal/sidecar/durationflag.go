package sidecar

import (
	"flag"
	"fmt"
	"time"
)

// DurationVar defines a duration flag like flag.FlagSet.DurationVar whose
// error says what a duration looks like: "--deadline 5" is answered
// `"5" is not a duration: give a duration such as 5s, 500ms or 1m30s`,
// not flag's bare "parse error". retry-sidecar and kubectl retry share it.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: give a duration such as 5s, 500ms or 1m30s", s)
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// Get makes the flag a flag.Getter, as flag's own duration flag is.
func (d *durationValue) Get() any { return time.Duration(*d) }
