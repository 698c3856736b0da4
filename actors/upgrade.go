package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-agents/cairn/actors/definition"
	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/schema"
)

// An upgrade moves a run that has not ended from the definition version it
// runs under to its agent's current one (an operator's decision: runs are
// otherwise pinned, versions.go). It is recorded in the run's log
// (events.RunUpgraded, with both versions), fenced on the session's last
// event so that it is checked against the state it is written over (an
// attempt in flight is fenced out by it, as by a cancel, and woken
// again), and taken at the run's next model boundary: there the run's checkpoint is
// committed once more under the new version's contract hash
// (runtime.Rehash), and every attempt after runs under the new version
// (C9 then holds as it is). A run whose last checkpoint sits between
// model steps (calls in flight, parked on its children) finishes them
// under its old version; its attempt stops before its next model request
// (errUpgradeDue) and the next one takes the new version.

// errUpgradeDue ends an attempt at a model boundary with an upgrade
// pending (lifecycle.Upgrading): nothing is committed, and the next
// attempt, which starts at that boundary, takes the new version.
var errUpgradeDue = errors.New("actors: an upgrade to another definition version is due at this model boundary")

// ErrCannotUpgrade: the run cannot take the definition it would be moved
// to; the error names why. It matches ErrInvalid.
var ErrCannotUpgrade = fmt.Errorf("%w: cannot upgrade", ErrInvalid)

// UpgradeResult is one run's upgrade: made (or, for a dry run, possible),
// or the reason it is not.
type UpgradeResult struct {
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
	Agent     string `json:"agent"`
	From      string `json:"from"`
	To        string `json:"to"`
	// Refused says why the run cannot be moved; "" when it can.
	Refused string `json:"refused,omitempty"`
}

// Upgrade moves a run that has not ended to its agent's current
// definition version, at its next model boundary (see above); with
// dryRun it only checks. Errors: ErrNotFound (no such run; its agent not
// deployed here), ErrCannotUpgrade (the run ended; it is on the current
// version; an upgrade is already pending; it cannot take the new
// definition: a child in flight the new one no longer spawns, or whose
// output no longer fits it; a call in flight the new one no longer
// offers), ErrUnavailable (the cluster's schema level is below
// events.UpgradeVersion: a member would not read the record). Nothing is
// written on an error.
func (n *Node) Upgrade(ctx context.Context, sessionID, runID string, dryRun bool) (UpgradeResult, error) {
	if lvl := n.store.WriteVersion(); lvl < events.UpgradeVersion {
		return UpgradeResult{}, fmt.Errorf("%w: the cluster writes schema level %d; upgrades need %d, which every member must read (operations.md, Upgrades)",
			ErrUnavailable, lvl, events.UpgradeVersion)
	}
	for attempt := 0; ; attempt++ {
		res, seq, err := n.checkUpgrade(ctx, sessionID, runID)
		if err != nil || dryRun {
			return res, err
		}
		ev, err := events.New(events.RunUpgraded, sessionID, runID, 0, 0, n.now(), events.Upgrade{From: res.From, To: res.To, By: ownerOf(ctx)})
		if err != nil {
			return UpgradeResult{}, err
		}
		ev.Version = events.UpgradeVersion
		err = n.runlog.publish(ctx, events.RunUpgradedSubject(sessionID, runID), ev, newID("upgraded."+sessionID+"."+runID+"."), seq)
		if errors.Is(err, runtime.ErrConflict) && attempt < 5 {
			continue // the session moved on since it was checked: check again
		}
		if err != nil {
			return UpgradeResult{}, err
		}
		n.logger.Info("run upgraded: it takes the new definition version at its next model boundary",
			"run", runID, "agent", res.Agent, "from", definition.Short(res.From), "to", definition.Short(res.To))
		// The record is a write into the run's session: an attempt in
		// flight is fenced out at its next commit (as by a cancel), and
		// the response it waits for is not committed. The wake starts the
		// next attempt, which begins at the model boundary and takes the
		// new version there; a parked run's attempt finishes its wait
		// first.
		n.wake(sessionID, runID, lifecycle.ReasonUpgraded)
		return res, nil
	}
}

type principalKey struct{}

// WithPrincipal records who asks for an upgrade (events.Upgrade.By).
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

func ownerOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// checkUpgrade reads the run and decides whether it can move to its
// agent's current version; seq is the session's last event it decided on.
func (n *Node) checkUpgrade(ctx context.Context, sessionID, runID string) (UpgradeResult, uint64, error) {
	last, err := n.runlog.last(ctx, events.SessionAll(sessionID))
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	rec, err := n.runlog.readRun(ctx, sessionID, runID)
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	if rec == nil || last == nil {
		return UpgradeResult{}, 0, fmt.Errorf("%w: run %s in session %s", ErrNotFound, runID, sessionID)
	}
	res := UpgradeResult{SessionID: sessionID, RunID: runID, Agent: rec.Agent}
	refuse := func(format string, args ...any) (UpgradeResult, uint64, error) {
		res.Refused = fmt.Sprintf(format, args...)
		return res, 0, fmt.Errorf("%w: run %s: %s", ErrCannotUpgrade, runID, res.Refused)
	}
	to, deployed := n.versions.current[rec.Agent]
	if !deployed {
		return UpgradeResult{}, 0, fmt.Errorf("%w: agent %q is not deployed on this node: it has no current version", ErrNotFound, rec.Agent)
	}
	res.To = to
	st, err := n.runlog.status(ctx, sessionID, runID)
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	if !st.Status.Active() {
		return refuse("it has ended (%s)", runtime.RunStatus(st.Status, st.Reply))
	}
	up, err := n.upgradeOf(ctx, rec)
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	from, _ := n.versions.of(rec)
	cp, err := n.store.LastCheckpoint(ctx, events.RunCheckpoints(sessionID, runID))
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	if up != nil {
		taken, err := n.upgradeTaken(ctx, rec, up, cp)
		if err != nil {
			return UpgradeResult{}, 0, err
		}
		if !taken {
			res.From = up.From
			return refuse("an upgrade to version %s is pending: the run takes it at its next model boundary", definition.Short(up.To))
		}
		from = up.To
	}
	res.From = from
	if from == to {
		return refuse("it runs under the current version %s already", definition.Short(to))
	}
	oldVer, err := n.versions.get(ctx, from)
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	newVer, err := n.versions.get(ctx, to)
	if err != nil {
		return UpgradeResult{}, 0, err
	}
	if why, err := n.cannotTake(ctx, rec, cp, oldVer, newVer); err != nil {
		return UpgradeResult{}, 0, err
	} else if why != "" {
		return refuse("%s", why)
	}
	return res, last.Sequence, nil
}

// cannotTake says why a run cannot take newVer (its agent's definition in
// it), or "" when it can: a child in flight whose agent newVer no longer
// spawns, or whose output (by the child's own, pinned, definition) would
// no longer fit newVer's schema for it; a call of its last checkpoint in
// flight that newVer no longer offers (a spawn of a removed subagent; a
// script while a capability is removed).
func (n *Node) cannotTake(ctx context.Context, rec *events.Run, cp *runtime.Checkpoint, oldVer, newVer definition.Version) (string, error) {
	newAgent := newVer.Agents[rec.Agent]
	if rec.RootRunID == rec.RunID && rec.Budget != nil && len(oldVer.Agents[rec.Agent].Definition.Subagents) == 0 && len(newAgent.Definition.Subagents) > 0 {
		// keepsInLog: such a root's budget may be in its own commits,
		// which its children, drawing on it from other actors, cannot see.
		return "it is a root without subagents, whose budget may be kept in its own log; the new definition spawns subagents, whose budget needs the shared ledger: start a new run instead", nil
	}
	kids, err := n.Children(ctx, rec.RunID)
	if err != nil {
		return "", err
	}
	slices.SortFunc(kids, func(a, b events.Run) int { return strings.Compare(a.RunID, b.RunID) })
	for _, k := range kids {
		if k.Agent == "" {
			continue // purged: it delivers nothing more
		}
		st, err := n.runlog.status(ctx, k.SessionID, k.RunID)
		if err != nil {
			return "", err
		}
		if !st.Status.Active() {
			continue // its result is delivered under the old contract's terms already, or will be as it is
		}
		if !slices.Contains(newAgent.Definition.Subagents, k.Agent) {
			return fmt.Sprintf("its child %s (agent %q) is in flight, and the new definition no longer spawns %q", k.RunID, k.Agent, k.Agent), nil
		}
		childID, _ := n.versions.of(&k)
		childVer, err := n.versions.get(ctx, childID)
		if err != nil {
			return "", err
		}
		was, now := childVer.Agents[k.Agent].Definition.OutputSchema, newVer.Agents[k.Agent].Definition.OutputSchema
		if !sameSchema(was, now) {
			return fmt.Sprintf("its child %s (agent %q) is in flight under an output schema the new definition no longer has for %q: its result may not fit", k.RunID, k.Agent, k.Agent), nil
		}
	}
	if cp != nil {
		for _, c := range cp.Calls {
			if c.State.Terminal() {
				continue
			}
			if slug, ok := strings.CutPrefix(c.Name, runtime.SpawnPrefix); ok && slug != "" && !slices.Contains(newAgent.Definition.Subagents, slug) {
				return fmt.Sprintf("its call %s (%s) is in flight, and the new definition no longer spawns %q", c.ID, c.Name, slug), nil
			}
			if c.Name == jstool.Name {
				for _, capName := range oldVer.Agents[rec.Agent].Definition.Capabilities {
					if !slices.Contains(newAgent.Definition.Capabilities, capName) {
						return fmt.Sprintf("its script %s is in flight, and the new definition no longer grants capability %q", c.ID, capName), nil
					}
				}
			}
		}
	}
	return "", nil
}

// sameSchema compares two schemas as the contract hash does (whitespace
// and key order mean nothing).
func sameSchema(a, b []byte) bool {
	canon := func(raw []byte) string {
		if len(raw) == 0 {
			return ""
		}
		s, err := schema.Compile(raw)
		if err != nil {
			return string(raw)
		}
		return string(s.Canonical())
	}
	return canon(a) == canon(b)
}

// upgradeOf is a run's latest upgrade; nil when it has none.
func (n *Node) upgradeOf(ctx context.Context, rec *events.Run) (*events.Upgrade, error) {
	var up events.Upgrade
	found, err := n.runlog.lastPayload(ctx, events.RunUpgradedSubject(rec.SessionID, rec.RunID), &up)
	if err != nil || !found {
		return nil, err
	}
	return &up, nil
}

// upgradeTaken reports whether the run took up: its last checkpoint is
// under up.To's contract, or it has none yet (its first attempt starts
// under up.To).
func (n *Node) upgradeTaken(ctx context.Context, rec *events.Run, up *events.Upgrade, cp *runtime.Checkpoint) (bool, error) {
	if cp == nil {
		return true, nil
	}
	h, err := n.versions.contract(ctx, up.To, rec.Agent)
	if err != nil {
		return false, err
	}
	return cp.ContractHash == h, nil
}

// contract is the contract hash of a run of agent slug under version id.
func (v *versions) contract(ctx context.Context, id, slug string) (string, error) {
	key := id + "/" + slug
	v.mu.Lock()
	h, ok := v.contracts[key]
	v.mu.Unlock()
	if ok {
		return h, nil
	}
	ver, err := v.get(ctx, id)
	if err != nil {
		return "", err
	}
	a, subs, caps, err := ver.Run(slug)
	if err != nil {
		return "", err
	}
	if h, err = runtime.ContractHash(a.Definition, subs, caps); err != nil {
		return "", err
	}
	v.mu.Lock()
	v.contracts[key] = h
	v.mu.Unlock()
	return h, nil
}

// takeUpgrade is what an attempt of a run with an upgrade does before it
// runs: pin is the version its record names (or its last upgrade's From).
// It returns the version to run under, and whether an upgrade is still
// due at the next model boundary (the controller stops there). A run at a
// model boundary takes the upgrade here: its checkpoint is committed once
// more under the new contract (runtime.Rehash) through the attempt's own
// store handle, under its lease.
func (n *Node) takeUpgrade(ctx context.Context, rec *events.Run, store runtime.Store, pin pinned) (pinned, bool, error) {
	up, err := n.upgradeOf(ctx, rec)
	if err != nil || up == nil {
		return pin, false, err
	}
	to, err := n.versions.resolveID(ctx, rec, up.To)
	if err != nil {
		return pin, false, err
	}
	from, err := n.versions.resolveID(ctx, rec, up.From)
	if err != nil {
		return pin, false, err
	}
	toHash, err := n.versions.contract(ctx, up.To, rec.Agent)
	if err != nil {
		return pin, false, err
	}
	cp, err := store.LoadCheckpoint(ctx)
	if err != nil {
		return pin, false, err
	}
	switch {
	case cp == nil:
		return to, false, nil // not begun: it begins under the new version
	case cp.Reply != nil:
		return from, false, nil // completed: the loop touches nothing (C7)
	case cp.ContractHash == toHash:
		return to, false, nil
	case cp.Phase == runtime.PhaseModel && !cp.HasCallsInFlight():
		if err := store.SaveCheckpoint(ctx, runtime.Rehash(cp, toHash)); err != nil {
			return pin, false, fmt.Errorf("actors: run %s: take upgrade to %s: %w", rec.RunID, definition.Short(up.To), err)
		}
		n.logger.Info("run took its upgrade", "run", rec.RunID, "from", definition.Short(up.From), "to", definition.Short(up.To), "revision", cp.Revision+1)
		return to, false, nil
	}
	return from, true, nil
}
