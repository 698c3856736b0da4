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
