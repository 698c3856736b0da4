package jsexec

import (
	"container/list"
	"sync"

	"github.com/dop251/goja"
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
	mu       sync.Mutex
	byCode   map[string]*list.Element
	order    *list.List // front: most recent
	bytes    int
	maxItems int
	maxBytes int
}

type cachedProgram struct {
	code string
	prg  *goja.Program
}

func newProgramCache(maxItems, maxBytes int) *programCache {
	return &programCache{byCode: map[string]*list.Element{}, order: list.New(), maxItems: maxItems, maxBytes: maxBytes}
}

// programs is shared by every realm of the process.
var programs = newProgramCache(512, 8<<20)

// compile returns the compiled wrapped script, from the cache when it is
// there.
func (c *programCache) compile(code string) (*goja.Program, error) {
	c.mu.Lock()
	if el, ok := c.byCode[code]; ok {
		c.order.MoveToFront(el)
		prg := el.Value.(*cachedProgram).prg
		c.mu.Unlock()
		return prg, nil
	}
	c.mu.Unlock()
	prg, err := goja.Compile(scriptName, wrapPrefix+code+wrapSuffix, false)
	if err != nil {
		return nil, err
	}
	if len(code) > c.maxBytes/4 {
		return prg, nil // one large script does not evict everything else
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byCode[code]; !ok {
		c.byCode[code] = c.order.PushFront(&cachedProgram{code: code, prg: prg})
		c.bytes += len(code)
		for c.order.Len() > c.maxItems || c.bytes > c.maxBytes {
			old := c.order.Remove(c.order.Back()).(*cachedProgram)
			delete(c.byCode, old.code)
			c.bytes -= len(old.code)
		}
	}
	return prg, nil
}
