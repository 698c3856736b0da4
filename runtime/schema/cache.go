package schema

import "github.com/cairn-agents/cairn/internal/lru"

// Each cache level is bounded by entries and by bytes of schema JSON. A
// node holds its definitions' schemas, their children's and their
// capabilities': a few hundred in practice, a few kilobytes each. The byte
// bound keeps a flood of large schemas from holding the heap (a compiled
// form takes 4 to 60 times its JSON in memory); a schema above a quarter of
// it (4 MiB) is compiled each time instead of evicting the rest.
const (
	cacheItems = 1024
	cacheBytes = 16 << 20
)

// schemaCache holds compiled schemas: by the SHA-256 of the bytes given to
// Compile (a hit costs one hash and one lookup) and by the SHA-256 of the
// canonical form (schemas that differ only in layout compile once). Both
// levels are charged the length of the JSON they were keyed by.
var schemaCache = struct {
	bytes     *lru.Cache[[32]byte, *Schema]
	canonical *lru.Cache[[32]byte, *compiled]
}{
	lru.New[[32]byte, *Schema](cacheItems, cacheBytes),
	lru.New[[32]byte, *compiled](cacheItems, cacheBytes),
}
