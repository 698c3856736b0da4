// Package provider holds the code the model provider adapters
// (runtime/model/openai, runtime/model/anthropic) share: the retry loop
// around one SDK call, the parsing of an error response, and small
// helpers. Each adapter keeps its own exported types and sentinels and
// passes its name ("openai", "anthropic") for the error texts.
package provider
