package policyset

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Credentials are a Redis ACL user and its password: the content of the
// sidecar's --quota-credentials-file, which a SharedQuota of a policy file
// reaches its store with (docs/quota.md). The text form is two lines:
//
//	username: payments-sidecars
//	password: 4f1c…
//
// Blank lines and lines starting with # are ignored; the username defaults to
// "default" (Redis's user of the plain AUTH <password>).
type Credentials struct {
	Username string
	Password string
}

// DefaultRedisUser is the user of a file that names none.
const DefaultRedisUser = "default"

// Format returns the text form of c.
func (c Credentials) Format() []byte {
	return fmt.Appendf(nil, "username: %s\npassword: %s\n", c.Username, c.Password)
}

// String never shows the password, so a Credentials logged by mistake leaks
// nothing.
func (c Credentials) String() string { return "username " + c.Username + ", password redacted" }

// ParseCredentials reads the text form. Errors name the line, never its value.
func ParseCredentials(data []byte) (Credentials, error) {
	c := Credentials{Username: DefaultRedisUser}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case !ok || (key != "username" && key != "password"):
			return Credentials{}, fmt.Errorf("line %d: must be \"username: <name>\" or \"password: <secret>\"", n)
		case seen[key]:
			return Credentials{}, fmt.Errorf("line %d: %s given twice", n, key)
		case value == "":
			return Credentials{}, fmt.Errorf("line %d: %s is empty", n, key)
		}
		seen[key] = true
		if key == "username" {
			c.Username = value
		} else {
			c.Password = value
		}
	}
	if err := sc.Err(); err != nil {
		return Credentials{}, err
	}
	if !seen["password"] {
		return Credentials{}, errors.New(`no "password: <secret>" line`)
	}
	return c, nil
}
