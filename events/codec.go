package events

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// The payload codec: events sealed at rest with AES-256-GCM, in the manner
// of Temporal's payload codec. A sealed body is
//
//	"\x00CK1" | len(key ID) (1 byte) | key ID | nonce (12 bytes) | ciphertext and tag
//
// The first byte (NUL) can never start a JSON text, so a reader tells a
// sealed body from a plain one by looking, and a log may hold both: one
// written before the codec was turned on, or by a node without it. The key
// ID travels in the body (authenticated: it is the AEAD's additional data,
// with the magic) and in the HeaderKey header, so natscli shows which key
// sealed a message beside the readable CloudEvents headers. Rotation is by
// key ID: a keyring seals with its first key and opens with any of them,
// so a new key goes first and the old ones stay until no event sealed with
// them is kept.
//
// What the codec does not hide: headers (type, version, epoch, the
// CloudEvents source with session and run IDs, times), subjects, sizes.

// HeaderKey names the key that sealed a message's body.
const HeaderKey = "Cairn-Key"

// Errors of the codec.
var (
	// ErrSealed is the answer of a reader without the key a body was
	// sealed with (no keyring at all, or not that key ID).
	ErrSealed = errors.New("events: sealed with a key this reader does not have")
	// ErrUnsealable is a sealed body that does not open: corrupt,
	// truncated, or sealed with another key of the same ID.
	ErrUnsealable = errors.New("events: sealed body does not open")
)

var sealMagic = []byte("\x00CK1")

const (
	nonceSize = 12
	keySize   = 32
	// maxKeyID bounds a key ID: it is a header value and one length byte.
	maxKeyID = 64
)

// Key is one AES-256 key and its ID.
type Key struct {
	ID     string
	Secret []byte
}

// Keyring seals with its first key and opens with any. A nil *Keyring is
// the codec turned off: Seal returns the body as it is, Open passes plain
// bodies and refuses sealed ones with ErrSealed.
type Keyring struct {
	active string
	aeads  map[string]cipher.AEAD
}

// NewKeyring makes a keyring of keys, the first sealing. Each key is 32
// bytes; IDs are unique, 1-64 characters of [A-Za-z0-9._-].
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("events: a keyring needs at least one key")
	}
	k := &Keyring{active: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, key := range keys {
		if err := checkKeyID(key.ID); err != nil {
			return nil, fmt.Errorf("events: key %d: %w", i+1, err)
		}
		if len(key.Secret) != keySize {
			return nil, fmt.Errorf("events: key %q: %d bytes, want %d (AES-256)", key.ID, len(key.Secret), keySize)
		}
		if _, dup := k.aeads[key.ID]; dup {
			return nil, fmt.Errorf("events: key %q: given twice", key.ID)
		}
		block, err := aes.NewCipher(key.Secret)
		if err != nil {
			return nil, fmt.Errorf("events: key %q: %w", key.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("events: key %q: %w", key.ID, err)
		}
		k.aeads[key.ID] = aead
	}
	return k, nil
}

func checkKeyID(id string) error {
	if id == "" || len(id) > maxKeyID {
		return fmt.Errorf("key ID %q: want 1 to %d characters", id, maxKeyID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("key ID %q: only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// ParseKeyring reads keys written one per line (or separated by commas) as
// "<id>:<base64 of 32 bytes>"; the first seals. Blank lines and lines
// starting with # are skipped. Errors name the entry by its position and
// ID, never its secret.
func ParseKeyring(text string) (*Keyring, error) {
	var keys []Key
	n := 0
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == ',' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		id, secret, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("events: key entry %d: want <id>:<base64 key>", n)
		}
		id = strings.TrimSpace(id)
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(secret))
		if err != nil {
			return nil, fmt.Errorf("events: key entry %d (%q): the key is not base64", n, id)
		}
		keys = append(keys, Key{ID: id, Secret: b})
	}
	return NewKeyring(keys...)
}

// NewKey returns a fresh random key entry line for ParseKeyring.
func NewKey(id string) (string, error) {
	if err := checkKeyID(id); err != nil {
		return "", err
	}
	b := make([]byte, keySize)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return id + ":" + base64.StdEncoding.EncodeToString(b), nil
}

// KeyID is the ID of the sealing key, "" for a nil keyring.
func (k *Keyring) KeyID() string {
	if k == nil {
		return ""
	}
	return k.active
}

// Overhead is how many bytes Seal adds to a body.
func (k *Keyring) Overhead() int {
	if k == nil {
		return 0
	}
	return len(sealMagic) + 1 + len(k.active) + nonceSize + k.aeads[k.active].Overhead()
}

// Seal encrypts body with the first key. A nil keyring returns body.
func (k *Keyring) Seal(body []byte) []byte {
	if k == nil {
		return body
	}
	aead := k.aeads[k.active]
	prefix := len(sealMagic) + 1 + len(k.active)
	out := make([]byte, prefix+nonceSize, prefix+nonceSize+len(body)+aead.Overhead())
	copy(out, sealMagic)
	out[len(sealMagic)] = byte(len(k.active))
	copy(out[len(sealMagic)+1:], k.active)
	// A random nonce: 2^32 messages per key keep the chance of a repeat
	// below 2^-32 (NIST SP 800-38D); rotate keys long before that.
	if _, err := rand.Read(out[prefix : prefix+nonceSize]); err != nil {
		// crypto/rand does not fail on the platforms Go supports
		// (it panics itself since Go 1.24); keep the contract anyway.
		panic(fmt.Sprintf("events: random nonce: %v", err))
	}
	return aead.Seal(out, out[prefix:prefix+nonceSize], body, out[:prefix])
}

// SealedBy reports the key ID a body was sealed with, and whether it is
// sealed at all.
func SealedBy(body []byte) (string, bool) {
	if !bytes.HasPrefix(body, sealMagic) {
		return "", false
	}
	if len(body) <= len(sealMagic) {
		return "", true
	}
	n := int(body[len(sealMagic)])
	if len(body) < len(sealMagic)+1+n {
		return "", true
	}
	return string(body[len(sealMagic)+1 : len(sealMagic)+1+n]), true
}

// Open returns a sealed body's plaintext, and a plain body as it is.
func (k *Keyring) Open(body []byte) ([]byte, error) {
	id, sealed := SealedBy(body)
	if !sealed {
		return body, nil
	}
	if k == nil {
		return nil, fmt.Errorf("%w (key %q): give the reader the node's payload keys", ErrSealed, id)
	}
	aead, ok := k.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w (key %q)", ErrSealed, id)
	}
	prefix := len(sealMagic) + 1 + len(id)
	if len(body) < prefix+nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a sealed empty body", ErrUnsealable, len(body))
	}
	plain, err := aead.Open(nil, body[prefix:prefix+nonceSize], body[prefix+nonceSize:], body[:prefix])
	if err != nil {
		return nil, fmt.Errorf("%w (key %q): %v", ErrUnsealable, id, err)
	}
	return plain, nil
}

// Encode is the package's Encode, sealed, with HeaderKey set.
func (k *Keyring) Encode(e Envelope, id string) ([]byte, map[string]string, error) {
	body, headers, err := Encode(e, id)
	if err != nil || k == nil {
		return body, headers, err
	}
	headers[HeaderKey] = k.active
	return k.Seal(body), headers, nil
}

// Decode is the package's Decode of a body that may be sealed.
func (k *Keyring) Decode(body []byte) (Envelope, error) {
	plain, err := k.Open(body)
	if err != nil {
		return Envelope{}, err
	}
	return Decode(plain)
}
