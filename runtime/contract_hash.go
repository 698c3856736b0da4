package runtime

// ContractHash is the contract hash every checkpoint of a run of def, with
// these subagents and this capability catalog, carries (Checkpoint.
// ContractHash; a resume under another hash is refused, C9). It is computed
// from the same inputs, by the same code, as the loop's, and fails on
// whatever the loop would refuse in them; it needs no run, store or
// model. Use it to move a run onto another definition version (a fork,
// a re-drive that accepts a contract change).
func ContractHash(def AgentDefinition, subagents []AgentDefinition, capabilities []Capability) (string, error) {
	in := Input{Definition: def, Subagents: subagents, Capabilities: capabilities}
	c, err := in.compile()
	if err != nil {
		return "", err
	}
	return c.hash, nil
}

// Rehash is the next revision of cp under another contract: the same
// state, nothing appended (C14), the revision advanced by one (C13), and
// contractHash (ContractHash's) in place of cp's. A host commits it to
// move a run that stands at a model boundary onto another definition
// version (an upgrade): the next resume then matches its input (C9). cp
// must be the run's last durable checkpoint.
func Rehash(cp *Checkpoint, contractHash string) *Checkpoint {
	next := cp.clone()
	next.Revision = cp.Revision + 1
	next.ContractHash = contractHash
	return next
}

// HasCallsInFlight reports whether a call of cp's journal has no
// postresult yet.
func (cp *Checkpoint) HasCallsInFlight() bool {
	for _, c := range cp.Calls {
		if !c.State.Terminal() {
			return true
		}
	}
	return false
}
