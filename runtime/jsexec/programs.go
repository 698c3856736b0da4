package jsexec

import (
	"github.com/dop251/goja"

	"github.com/cairn-agents/cairn/internal/lru"
)

// helperProgram is the realm helpers, compiled once for every realm.
var helperProgram = goja.MustCompile("helpers", helperSource, false)

// programCache keeps compiled scripts by source: a model sends the same
// script again and again (a retried call, a loop of similar steps), and
// compiling was half of run_js's own cost. A goja.Program is not bound to
// a runtime and may be run by any realm, concurrently. Bounded by entries
// and by source bytes, least recently used out first; a script that does
// not compile is not kept.
type programCache struct {
	c *lru.Cache[string, *goja.Program]
}

func newProgramCache(maxItems, maxBytes int) *programCache {
	return &programCache{c: lru.New[string, *goja.Program](maxItems, maxBytes)}
}

// programs is shared by every realm of the process.
var programs = newProgramCache(512, 8<<20)

// compile returns the compiled wrapped script, from the cache when it is
// there.
func (c *programCache) compile(code string) (*goja.Program, error) {
	if prg, ok := c.c.Get(code); ok {
		return prg, nil
	}
	prg, err := goja.Compile(scriptName, wrapPrefix+code+wrapSuffix, false)
	if err != nil {
		return nil, err
	}
	c.c.Add(code, prg, len(code))
	return prg, nil
}
