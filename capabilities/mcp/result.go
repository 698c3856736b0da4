package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// BlobStore keeps attachment bytes in host storage and returns a reference
// to them (C16: attachments are host storage references, never data in the
// JavaScript heap or in the transcript).
type BlobStore interface {
	// Put stores data and returns its reference. Storing the same bytes
	// twice may return the same reference.
	Put(ctx context.Context, data []byte, mediaType string) (ref string, err error)
}

// ErrToolError matches the error of a call whose result had isError set:
// the tool ran and reported a failure (its text is the error's message).
var ErrToolError = errors.New("mcp: the tool reported an error")

// resultValue is the callback's value, as JavaScript sees it:
//
//	{"text": "...", "structured": ..., "attachments": [...], "links": [...]}
//
// text joins the text blocks with newlines; structured is the tool's
// structured content; attachments are the images, audio and embedded
// resources, stored by the host (their bytes never enter JavaScript);
// links are resource links as the server gave them. Empty members are
// left out.
type resultValue struct {
	Text        string             `json:"text,omitempty"`
	Structured  any                `json:"structured,omitempty"`
	Attachments []model.Attachment `json:"attachments,omitempty"`
	Links       []resourceLink     `json:"links,omitempty"`
}

type resourceLink struct {
	URI       string `json:"uri"`
	Name      string `json:"name,omitempty"`
	MediaType string `json:"media_type,omitempty"`
}

// resultShape is what the model is told about every MCP capability's value.
const resultShape = " Returns {text, structured?, attachments?, links?}: the text blocks joined, the structured content, stored images/audio/resources (references), resource links. A tool error throws."

// convertResult turns a CallToolResult into a callback value: text and
// structured content become the value, images, audio and embedded
// resources become attachments stored through blobs, and isError becomes
// an error wrapping ErrToolError. redact applies to text resources before
// they are stored (the value itself is redacted by the canonical invoker).
func convertResult(ctx context.Context, res *sdk.CallToolResult, blobs BlobStore, redact runtime.Redactor) (jstool.Value, error) {
	if res == nil {
		return jstool.Value{}, errors.New("mcp: empty result")
	}
	var out resultValue
	var texts []string
	for i, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			texts = append(texts, c.Text)
		case *sdk.ImageContent:
			a, err := store(ctx, blobs, c.Data, c.MIMEType, "")
			if err != nil {
				return jstool.Value{}, fmt.Errorf("content[%d] (image): %w", i, err)
			}
			out.Attachments = append(out.Attachments, a)
		case *sdk.AudioContent:
			a, err := store(ctx, blobs, c.Data, c.MIMEType, "")
			if err != nil {
				return jstool.Value{}, fmt.Errorf("content[%d] (audio): %w", i, err)
			}
			out.Attachments = append(out.Attachments, a)
		case *sdk.EmbeddedResource:
			if c.Resource == nil {
				return jstool.Value{}, fmt.Errorf("content[%d]: an embedded resource without contents", i)
			}
			data := c.Resource.Blob
			if data == nil {
				data = []byte(redact.Redact(c.Resource.Text))
			}
			a, err := store(ctx, blobs, data, c.Resource.MIMEType, c.Resource.URI)
			if err != nil {
				return jstool.Value{}, fmt.Errorf("content[%d] (resource %s): %w", i, c.Resource.URI, err)
			}
			out.Attachments = append(out.Attachments, a)
		case *sdk.ResourceLink:
			out.Links = append(out.Links, resourceLink{URI: c.URI, Name: c.Name, MediaType: c.MIMEType})
		default:
			// A content type newer than this code: say so instead of
			// dropping it without a trace.
			texts = append(texts, fmt.Sprintf("[content of type %T not supported by Cairn]", c))
		}
	}
	out.Text = strings.Join(texts, "\n")
	if res.IsError {
		msg := out.Text
		if msg == "" {
			msg = "(no message)"
		}
		return jstool.Value{}, fmt.Errorf("%w: %s", ErrToolError, msg)
	}
	out.Structured = res.StructuredContent
	js, err := json.Marshal(out)
	if err != nil {
		return jstool.Value{}, fmt.Errorf("mcp: result: %w", err)
	}
	return jstool.Value{JSON: js, Attachments: out.Attachments}, nil
}

func store(ctx context.Context, blobs BlobStore, data []byte, mediaType, name string) (model.Attachment, error) {
	if blobs == nil {
		return model.Attachment{}, errors.New("no attachment storage is configured on this node")
	}
	ref, err := blobs.Put(ctx, data, mediaType)
	if err != nil {
		return model.Attachment{}, fmt.Errorf("store attachment: %w", err)
	}
	return model.Attachment{Ref: ref, MediaType: mediaType, Name: name, Size: int64(len(data))}, nil
}

// effectOf derives a tool's effect class from its annotations: read-only
// when readOnlyHint is set; idempotent when idempotentHint is set (an
// idempotent destructive tool, such as a delete, is still safe to repeat
// with the same arguments); otherwise effectful, whatever destructiveHint
// says (additive updates are not safe to repeat either). No annotations
// means effectful. An override from the configuration wins.
func effectOf(a *sdk.ToolAnnotations, override string) string {
	switch {
	case override != "":
		return override
	case a == nil:
		return runtime.EffectEffectful
	case a.ReadOnlyHint:
		return runtime.EffectReadOnly
	case a.IdempotentHint:
		return runtime.EffectIdempotent
	}
	return runtime.EffectEffectful
}
