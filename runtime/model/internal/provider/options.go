package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"sort"
)

// OptionErrorFunc builds an adapter's *OptionError: option is the key
// ("" for the options as a whole), the rest the reason.
type OptionErrorFunc func(option, format string, args ...any) error

// DecodeOptions decodes raw provider options, a JSON object, into o (a
// pointer to the adapter's Options). Empty or null raw leaves o as it is.
// checkKey is called for every key, in sorted order, before anything is
// decoded; its error is returned as is. Every other error is made by bad.
func DecodeOptions(raw json.RawMessage, o any, checkKey func(key string) error, bad OptionErrorFunc) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return bad("", "options must be a JSON object")
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	if err := json.Unmarshal(raw, o); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return bad(te.Field, "a JSON %s cannot be a %s", te.Value, te.Type)
		}
		return bad("", "%v", err)
	}
	return nil
}

// CheckExtraBody checks the extra_body option: in key order, no key the
// adapter sets itself (owned) and only valid JSON values.
func CheckExtraBody(extra map[string]json.RawMessage, owned []string, bad OptionErrorFunc) error {
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(owned, k) {
			return bad("extra_body", "%q is set by the adapter", k)
		}
		if !json.Valid(extra[k]) {
			return bad("extra_body", "%q is not valid JSON", k)
		}
	}
	return nil
}
