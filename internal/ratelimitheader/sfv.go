package ratelimitheader

import (
	"encoding/base64"
	"unsafe"
)

// A small, allocation-free scanner for the RFC 9651 structured-field shapes the
// rate-limit headers use: Lists of Items with parameters. It accepts a subset of
// RFC 9651 (no inner lists, Dates or Display Strings: none of them is a valid
// RateLimit member) and, on every input it accepts, agrees with
// github.com/dunglas/httpsfv, which passes the HTTP WG's structured-field test
// suite; FuzzRateLimitAgreesWithHTTPSFV holds the two equal.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBinary
	sfBoolean
)

// sfItem is a scanned bare item; n is the value of an Integer or Boolean.
type sfItem struct {
	kind sfKind
	n    int64
}

type sfScanner struct {
	s    string
	i    int
	fail string // reason of the last failure
}

func (sc *sfScanner) eof() bool { return sc.i >= len(sc.s) }

func (sc *sfScanner) skipSP() {
	for sc.i < len(sc.s) && sc.s[sc.i] == ' ' {
		sc.i++
	}
}

func (sc *sfScanner) skipOWS() {
	for sc.i < len(sc.s) && (sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t') {
		sc.i++
	}
}

// listNext consumes the separator after a list member: OWS, then end of input,
// or "," OWS and another member. false if the list is malformed there.
func (sc *sfScanner) listNext() bool {
	sc.skipOWS()
	if sc.eof() {
		return true
	}
	if sc.s[sc.i] != ',' {
		return false
	}
	sc.i++
	sc.skipOWS()
	return !sc.eof() // a trailing comma is an error
}

// key scans a parameter key: lcalpha or "*", then lcalpha, DIGIT, "_-.*".
func (sc *sfScanner) key() (string, bool) {
	start := sc.i
	if sc.eof() || !(isLCAlpha(sc.s[sc.i]) || sc.s[sc.i] == '*') {
		return "", false
	}
	sc.i++
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		sc.i++
	}
	return sc.s[start:sc.i], true
}

// bareValue scans one bare item. On failure it sets sc.fail.
func (sc *sfScanner) bareValue() (sfItem, bool) {
	if sc.eof() {
		return sc.failed(reasonSyntax)
	}
	switch c := sc.s[sc.i]; {
	case c == '"':
		return sc.str()
	case c == '?':
		if sc.i+1 < len(sc.s) && (sc.s[sc.i+1] == '0' || sc.s[sc.i+1] == '1') {
			v := int64(sc.s[sc.i+1] - '0')
			sc.i += 2
			return sfItem{kind: sfBoolean, n: v}, true
		}
		return sc.failed(reasonSyntax)
	case c == ':':
		return sc.binary()
	case c == '-' || isDigit(c):
		return sc.number()
	case c == '*' || isAlpha(c):
		sc.i++
		for sc.i < len(sc.s) && isExtendedTChar(sc.s[sc.i]) {
			sc.i++
		}
		return sfItem{kind: sfToken}, true
	case c == '@' || c == '%' || c == '(':
		return sc.failed(reasonUnsupport)
	}
	return sc.failed(reasonSyntax)
}

func (sc *sfScanner) failed(reason string) (sfItem, bool) {
	sc.fail = reason
	return sfItem{}, false
}

// number scans an Integer (up to 15 digits) or a Decimal (up to 12 integer and
// 3 fractional digits), exactly as RFC 9651 §4.2.4 counts them.
func (sc *sfScanner) number() (sfItem, bool) {
	neg := false
	if sc.s[sc.i] == '-' {
		neg = true
		sc.i++
	}
	if sc.eof() || !isDigit(sc.s[sc.i]) {
		return sc.failed(reasonSyntax)
	}
	start := sc.i
	var n int64
	dot := -1
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		if isDigit(c) {
			sc.i++
			size := sc.i - start
			if (dot < 0 && size > 15) || size > 16 {
				return sc.failed(reasonSyntax)
			}
			if dot < 0 {
				n = n*10 + int64(c-'0')
			}
			continue
		}
		if dot < 0 && c == '.' {
			if sc.i-start > 12 {
				return sc.failed(reasonSyntax)
			}
			dot = sc.i
			sc.i++
			continue
		}
		break
	}
	if dot >= 0 {
		if dot == sc.i-1 || sc.i-dot-1 > 3 {
			return sc.failed(reasonSyntax)
		}
		return sfItem{kind: sfDecimal}, true
	}
	if neg {
		n = -n
	}
	return sfItem{kind: sfInteger, n: n}, true
}

// str scans a String: printable ASCII, with \" and \\ the only escapes.
func (sc *sfScanner) str() (sfItem, bool) {
	sc.i++ // opening quote
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		sc.i++
		switch {
		case c == '\\':
			if sc.eof() || (sc.s[sc.i] != '"' && sc.s[sc.i] != '\\') {
				return sc.failed(reasonSyntax)
			}
			sc.i++
		case c == '"':
			return sfItem{kind: sfString}, true
		case c <= 0x1f || c >= 0x7f:
			return sc.failed(reasonSyntax)
		}
	}
	return sc.failed(reasonSyntax)
}

// binary scans a Byte Sequence: ":" padded base64 ":". The content is checked
// by decoding it four characters at a time into a stack buffer.
func (sc *sfScanner) binary() (sfItem, bool) {
	sc.i++ // opening colon
	start := sc.i
	for sc.i < len(sc.s) && sc.s[sc.i] != ':' {
		c := sc.s[sc.i]
		if !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
			return sc.failed(reasonSyntax)
		}
		sc.i++
	}
	if sc.eof() {
		return sc.failed(reasonSyntax)
	}
	b64 := sc.s[start:sc.i]
	sc.i++ // closing colon
	if len(b64)%4 != 0 {
		return sc.failed(reasonSyntax)
	}
	var buf [3]byte
	for j := 0; j < len(b64); j += 4 {
		chunk := b64[j : j+4]
		if j+4 < len(b64) && (chunk[2] == '=' || chunk[3] == '=') {
			return sc.failed(reasonSyntax) // padding only at the very end
		}
		if _, err := base64.StdEncoding.Decode(buf[:], unsafeBytes(chunk)); err != nil {
			return sc.failed(reasonSyntax)
		}
	}
	return sfItem{kind: sfBinary}, true
}

// sfSameName compares two scanned names: tokens by their text, strings by their
// unescaped content; a token never equals a string, and names of other kinds
// (numbers, booleans, byte sequences) never match.
func sfSameName(a, b sfSpan) bool {
	if a.kind != b.kind || (a.kind != sfString && a.kind != sfToken) {
		return false
	}
	if a.kind != sfString {
		return a.text == b.text
	}
	i, j := 1, 1 // past the opening quotes
	for {
		ca, na := unescapeAt(a.text, i)
		cb, nb := unescapeAt(b.text, j)
		if na == 0 || nb == 0 {
			return na == nb // both at the closing quote
		}
		if ca != cb {
			return false
		}
		i, j = i+na, j+nb
	}
}

// unescapeAt returns the content byte of a scanned String at i and how many
// bytes of text it took; 0 at the closing quote.
func unescapeAt(text string, i int) (byte, int) {
	switch text[i] {
	case '"':
		return 0, 0
	case '\\':
		return text[i+1], 2
	}
	return text[i], 1
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || ('A' <= c && c <= 'Z') }

// isExtendedTChar: RFC 9110 tchar plus ":" and "/" (RFC 9651 sf-token).
func isExtendedTChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}

// unsafeBytes views s as bytes for a decoder that only reads them.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
