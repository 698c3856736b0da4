package main

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/runtime/model"
)

// agentModels builds the models of agents, deployed now or pinned by the
// runs of an earlier deployment (actors.Config.Model): from the model
// spec and retry policy the agent carries (actors.Agent.Model,
// ModelConfig), which a run's definition version keeps, so that a run
// admitted before a deploy that changed its agent's model keeps its
// model.
type agentModels struct {
	dir     string
	metrics *metrics

	mu    sync.Mutex
	built map[string]model.Model
}

// models resolves each deployed agent's model (the --model flag, a
// provider key, the file's model: modelSpec) into the agent, with its
// retry policy, and builds it: a model that cannot be built fails the
// start, naming the file and field.
func (d *deployment) models(o nodeOptions) (*agentModels, error) {
	m := &agentModels{dir: d.dir, metrics: o.metrics, built: map[string]model.Model{}}
	for _, a := range d.agents {
		cfg, err := json.Marshal(a.spec.Retry)
		if err != nil {
			return nil, err
		}
		a.agent.Model, a.agent.ModelConfig = modelSpec(o.model, a.spec.Model), cfg
		if _, err := m.build(a.agent); err != nil {
			ferr := &fileError{File: a.file, Field: "model", Reason: err.Error()}
			if !o.servePinned {
				return nil, ferr
			}
			d.refuse(a.spec.Slug, ferr)
		}
	}
	if len(d.agents) == 0 {
		return nil, d.refused[0]
	}
	return m, nil
}

// build is the model of a, once per agent, spec and policy.
func (m *agentModels) build(a actors.Agent) (model.Model, error) {
	key := a.Definition.Slug + "\x00" + a.Model + "\x00" + string(a.ModelConfig)
	m.mu.Lock()
	defer m.mu.Unlock()
	if built, ok := m.built[key]; ok {
		return built, nil
	}
	var rf retryFile
	if len(a.ModelConfig) > 0 {
		if err := json.Unmarshal(a.ModelConfig, &rf); err != nil {
			return nil, fmt.Errorf("agent %s: model retry policy: %w", a.Definition.Slug, err)
		}
	}
	policy, ferr := rf.policy()
	if ferr != nil {
		return nil, fmt.Errorf("agent %s: %s: %s", a.Definition.Slug, ferr.Field, ferr.Reason)
	}
	built, err := newModel(a.Model, m.dir, policy)
	if err != nil {
		return nil, err
	}
	if m.metrics != nil {
		built = m.metrics.model(a.Definition.Slug, built)
	}
	m.built[key] = built
	return built, nil
}
