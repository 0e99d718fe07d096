package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/placement"
)

// One process runs every connector of the configuration, each in its own
// goroutine with its own context, connections, queues and metrics
// registry. A connector that stops on an error stops alone:
//
//   - Halted (bad input with on_error halt, a lost binlog or slot, a
//     configuration the servers refuse, a failed lifecycle): the connector
//     stays stopped in state "halted" with its error, visible on /readyz,
//     /healthz and outbox_cdc_connector_state, as Kafka Connect leaves a
//     FAILED task. Restarting it by itself would replay the same poison
//     row or the same missing position forever; an operator fixes the
//     cause and restarts it with POST /connectors/NAME/restart (or
//     restarts the process). The others keep running.
//   - HA lock lost (ha.enabled): another replica holds the connector now.
//     The connector's parts are aborted as before (fenced checkpoint,
//     closed sink) and, with several connectors in the process, it
//     returns to standby with fresh connections after haRestandbyDelay.
//     A process with a single connector exits 1 instead, as it always
//     did; its supervisor restarts it as a standby.
//
// The process exits when no connector is left running or waiting: 0 when
// none stopped on an error, else 1. A single-connector process therefore
// exits exactly as before. With placement (placement.go) the group decides
// which connectors run here, and the process runs until its signal, also
// while it holds none.

// Connector states, as /readyz, /healthz and outbox_cdc_connector_state
// name them.
const (
	stateStopped    = "stopped"    // not started, or stopped by Stop (placement)
	stateStandby    = "standby"    // waiting for its HA lock: another replica is active
	stateStarting   = "starting"   // building its parts, or loading the checkpoint
	stateConnecting = "connecting" // built, its source has not connected yet since it started (a wrong host or port, the server down)
	stateRunning    = "running"    // streaming (ready when its source and sink are connected)
	stateStopping   = "stopping"   // draining after Stop or the process's signal
	stateHalted     = "halted"     // stopped on an error; stays until restarted
	statePaused     = "paused"     // running, but paused by PUT /connectors/NAME/pause (restapi.go)
)

var allStates = []string{stateStopped, stateStandby, stateStarting, stateConnecting, stateRunning, stateStopping, stateHalted, statePaused}

// haRestandbyDelay is the pause before a connector that lost its HA lock
// waits for it again (in a process with several connectors).
const haRestandbyDelay = time.Second

// supervisor runs the connectors of one process. Start, Stop and Restart
// may be called from any goroutine (the HTTP server, a placement loop).
type supervisor struct {
	ctx  context.Context // the process's: cancelled by SIGINT/SIGTERM
	opts runOptions
	log  zerolog.Logger
	// exitOnLost: a lost HA lock halts the connector (one connector in
	// the process) instead of returning it to standby.
	exitOnLost bool

	// workerID names this replica in the REST API's status (host:port).
	workerID string

	// unfit: with placement, the connectors that stepped down here and
	// are given up to the group; idle proves for the connectors this
	// replica does not run (placement_stepdown.go). nil without placement.
	unfit *placement.UnfitSet
	idle  map[string]*idleProbe

	mu      sync.Mutex
	order   []string
	conns   map[string]*managed
	changed chan struct{} // closed and replaced at every state change
}

// managed is one connector and its current run. Fields after mu are
// guarded by supervisor.mu.
type managed struct {
	cfg Config

	state  string
	err    error // why it halted
	since  time.Time
	role   *haState             // the current run's, nil before it exists
	reg    *prometheus.Registry // the current (or last) run's metrics
	cancel context.CancelFunc
	done   chan struct{} // closed when the run's goroutine returns
	// gate pauses the connector's pipeline (PUT .../pause); it outlives runs.
	gate *outboxcdc.Gate
	// target orders the changes of the kept target state with the gate:
	// the API's pause, resume and stop against a run's watchTarget.
	target *sync.Mutex
	// held: stopped by PUT .../stop, persisted beside the position
	// (stopstate.go); Start leaves it stopped until resumed.
	held bool
	// restarting: between the Stop and the Start of Restart, when the
	// process must not take the connector for finished.
	restarting bool
	// polling: held, and its run waits for a resume (sharedHold).
	polling bool
}

func newSupervisor(ctx context.Context, cs []Config, opts runOptions, log zerolog.Logger) *supervisor {
	s := &supervisor{ctx: ctx, opts: opts, log: log, exitOnLost: len(cs) == 1,
		conns: map[string]*managed{}, changed: make(chan struct{})}
	for _, c := range cs {
		s.order = append(s.order, c.Name)
		s.conns[c.Name] = &managed{cfg: c, state: stateStopped, since: time.Now(), reg: prometheus.NewRegistry(), gate: outboxcdc.NewGate(), target: &sync.Mutex{}}
	}
	return s
}

var errNoConnector = errors.New("no such connector")

// setState records a state change and wakes whoever waits for one.
// Callers hold s.mu.
func (s *supervisor) setState(m *managed, state string, err error) {
	m.state, m.err, m.since = state, err, time.Now()
	close(s.changed)
	s.changed = make(chan struct{})
}

// Start starts the named connector unless it runs already (standby,
// starting, running). A halted or stopped connector starts afresh: new
// connections, new metrics registry, from its checkpoint.
func (s *supervisor) Start(name string) error {
	s.stopIdleProbe(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.conns[name]
	if !ok {
		return fmt.Errorf("%w %q", errNoConnector, name)
	}
	if m.done != nil {
		select {
		case <-m.done:
		default:
			return nil // running, or stopping (Stop waits for it)
		}
	}
	if s.ctx.Err() != nil {
		return s.ctx.Err()
	}
	if m.held && !sharedHold(m.cfg) {
		return nil // stopped by PUT .../stop until resumed
	}
	ctx, cancel := context.WithCancel(s.ctx)
	m.cancel, m.done = cancel, make(chan struct{})
	// The previous run's role (its stopped pipeline) must not speak for
	// this one: status would derive "running" and its stale reason.
	m.role = nil
	s.setState(m, stateStarting, nil)
	go s.loop(ctx, m, m.done)
	return nil
}

// Stop stops the named connector gracefully (what it received is
// delivered and checkpointed, bounded by pipeline.shutdown_timeout, and
// its HA lock is released) and waits until it has.
func (s *supervisor) Stop(name string) error {
	s.mu.Lock()
	m, ok := s.conns[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("%w %q", errNoConnector, name)
	}
	done, cancel := m.done, m.cancel
	if done != nil {
		select {
		case <-done:
		default:
			// A connector that has just halted (its goroutine is returning)
			// keeps that state: the process's exit status comes from it.
			if m.state != stateHalted && m.state != stateStopped {
				s.setState(m, stateStopping, nil)
			}
		}
	}
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	<-done
	s.startIdleProbe(name)
	return nil
}

// errAssignmentLost is the cause of an abort by placement.
var errAssignmentLost = errors.New("the placement group gave the connector to another replica while this one was silent")

// Abort implements placement.Connectors (a lost assignment): abortConnector.
func (s *supervisor) Abort(name string) error { return s.abortConnector(name, errAssignmentLost) }

// abortConnector stops the named connector at once, without draining:
// no further sink write is issued, the write in flight is cancelled, what
// was read ahead is dropped (the next owner reads it again from the
// checkpoint), no checkpoint is saved, then the lock is released; it
// waits until the connector has stopped. This is the stop for when another
// replica may already stream the connector (a lost assignment); Stop is
// the graceful one.
func (s *supervisor) abortConnector(name string, cause error) error {
	s.mu.Lock()
	m, ok := s.conns[name]
	var role *haState
	if ok {
		role = m.role
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q", errNoConnector, name)
	}
	if role != nil {
		s.log.Warn().Str("connector", name).Str("reason", cause.Error()).Msg("aborting the connector without draining")
		role.abortRun(cause)
	}
	return s.Stop(name)
}

// Restart stops the named connector if it runs, then starts it.
func (s *supervisor) Restart(name string) error {
	s.mu.Lock()
	m, ok := s.conns[name]
	if ok {
		m.restarting = true
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q", errNoConnector, name)
	}
	defer func() {
		s.mu.Lock()
		m.restarting = false
		close(s.changed) // wake wait
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}()
	if err := s.Stop(name); err != nil {
		return err
	}
	return s.Start(name)
}

// loop runs m until its context ends or it halts.
func (s *supervisor) loop(ctx context.Context, m *managed, done chan struct{}) {
	defer close(done)
	log := s.log.With().Str("connector", m.cfg.Name).Logger()
	steppedDown := false // the last run stepped down (stepdown.go)
	for {
		reg := prometheus.NewRegistry()
		var role *haState
		s.mu.Lock()
		m.reg, m.role = reg, nil
		if m.state != stateStarting {
			s.setState(m, stateStarting, nil) // after a lost lock: live again
		}
		s.mu.Unlock()
		err := runOne(ctx, m.cfg, s.opts, log, prometheus.WrapRegistererWith(prometheus.Labels{"connector": m.cfg.Name}, reg), runControl{worker: s.workerID, gate: m.gate, target: m.target, notHeld: func() {
			s.mu.Lock()
			m.held, m.polling = false, false
			s.mu.Unlock()
		}, steppedDown: steppedDown, fitAgain: func() { s.fitAgain(m.cfg.Name) }},
			func(r *haState) {
				role = r
				s.mu.Lock()
				m.role = r
				s.mu.Unlock()
			})
		lost := role != nil && role.err() != nil
		steppedDown = errors.Is(err, errSteppedDown)
		s.mu.Lock()
		switch {
		case steppedDown:
			// Also with one connector in the process: it stays up as a
			// standby, proving it reaches the sink (stepdown.go). With
			// placement, the group gives it to another replica.
			s.setState(m, stateStandby, nil)
			m.role = nil
			s.mu.Unlock()
			s.markUnfit(m.cfg.Name)
			if ctx.Err() != nil {
				s.mu.Lock()
				s.setState(m, stateStopped, nil)
				s.mu.Unlock()
				return
			}
			log.Warn().Msg("stepped down: back to standby with fresh connections")
			continue
		case err == nil:
			s.setState(m, stateStopped, nil)
			s.mu.Unlock()
			return
		case errors.Is(err, errHeld) && sharedHold(m.cfg):
			// Look again while standby: a resume may come on any replica.
			first := !m.polling
			m.held, m.polling = true, true
			s.setState(m, stateStandby, nil)
			m.role = nil
			s.mu.Unlock()
			if first {
				log.Info().Str("resume", "PUT /connectors/"+m.cfg.Name+"/resume").Msg("not starting: the connector was stopped through the REST API (kept in the checkpoint table); checking for a resume while standby")
			}
			select {
			case <-ctx.Done():
				s.mu.Lock()
				m.polling = false
				s.setState(m, stateStopped, nil)
				s.mu.Unlock()
				return
			case <-time.After(heldPoll):
			}
			// Resumed elsewhere: wait for the lock as a plain standby (the
			// replica that resumed it runs it).
			if held, err := readHeld(ctx, m.cfg, s.log); err == nil && !held {
				s.mu.Lock()
				m.held, m.polling = false, false
				s.mu.Unlock()
			}
			continue
		case errors.Is(err, errHeld):
			m.held = true
			s.setState(m, stateStopped, nil)
			s.mu.Unlock()
			log.Info().Str("resume", "PUT /connectors/"+m.cfg.Name+"/resume").Msg("not starting: the connector was stopped through the REST API (the stop is kept in the checkpoint store)")
			return
		case lost && !s.exitOnLost:
			s.setState(m, stateStandby, nil)
			m.role = nil
			s.mu.Unlock()
			log.Warn().Dur("in", haRestandbyDelay).Msg("lost the HA lock: back to standby with fresh connections")
			select {
			case <-ctx.Done():
				s.mu.Lock()
				s.setState(m, stateStopped, nil)
				s.mu.Unlock()
				return
			case <-time.After(haRestandbyDelay):
			}
			continue
		default:
			// Also an error while stopping (the final flush did not finish
			// within pipeline.shutdown_timeout): the process exits 1.
			s.setState(m, stateHalted, err)
			single := len(s.order) == 1
			s.mu.Unlock()
			logHalt(log, err, single || ctx.Err() != nil, m.cfg.Name)
			return
		}
	}
}

// logHalt logs, once, why a connector stopped on err: the cause and the
// remedy each in a field of its own (outboxcdc.LogError). Nothing below
// the supervisor logs the error it returns. alone: no other connector of
// the process keeps running.
func logHalt(log zerolog.Logger, err error, alone bool, name string) {
	ev := outboxcdc.LogError(log.Error(), err)
	if alone {
		ev.Msg("stopped on error")
		return
	}
	ev.Str("restart", "POST /connectors/"+name+"/restart").Msg("connector halted; the others keep running (restart it once the cause is fixed)")
}

// connectorStatus is one connector in the /readyz, /healthz and
// /connectors answers.
type connectorStatus struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Active bool   `json:"active"` // holds its HA lock (or HA is off) and streams
	Ready  bool   `json:"ready"`
	// Reason says why it is not ready, or why it halted.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// status reports every connector in configuration order. A standby or
// stopped connector is ready: it has nothing to do on this replica, and a
// replica that holds no connector must not stall a rolling update.
func (s *supervisor) status() []connectorStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]connectorStatus, 0, len(s.order))
	for _, name := range s.order {
		m := s.conns[name]
		st := connectorStatus{Name: name, State: m.state, Since: m.since}
		switch m.state {
		case stateStopped:
			st.Ready = true
			if m.held {
				st.Reason = "stopped by PUT /connectors/" + name + "/stop; PUT /connectors/" + name + "/resume starts it"
			}
		case stateHalted:
			st.Reason = m.err.Error()
		case stateStarting:
			st.State, st.Ready, st.Active = s.phase(m)
			if !st.Ready {
				if err := readyErr(m.role); err != nil {
					st.Reason = err.Error()
				}
			}
			if st.State == stateRunning && m.gate.Paused() {
				// Deliberately idle: ready, as a standby is.
				st.State, st.Ready, st.Reason = statePaused, true, "paused by PUT /connectors/"+name+"/pause; PUT /connectors/"+name+"/resume continues"
			}
		case stateStandby:
			st.Ready = true
		}
		out = append(out, st)
	}
	return out
}

// phase derives a live connector's state from its HA role: standby while
// it waits for the lock, starting until its pipeline exists, then running;
// stopping once the lock is lost or its lease has expired at this moment.
// Callers hold s.mu.
func (s *supervisor) phase(m *managed) (state string, ready, active bool) {
	r := m.role
	if r == nil {
		return stateStarting, false, false
	}
	r.mu.Lock()
	standby, lost, pipeline := r.standby, r.lost, r.ready
	r.mu.Unlock()
	switch {
	case lost:
		return stateStopping, false, false
	case standby:
		return stateStandby, true, false
	case !r.holds(time.Now()):
		// The lease is judged now, not from what the last check left:
		// a replica resumed after a freeze is not active for a moment.
		return stateStopping, false, false
	case pipeline == nil:
		return stateStarting, false, true
	}
	err := r.Ready()
	if outboxcdc.IsConnecting(err) {
		// Never connected since it started: not a running connector whose
		// stream was lost.
		return stateConnecting, false, true
	}
	return stateRunning, err == nil, true
}

func readyErr(r *haState) error {
	if r == nil {
		return errors.New("starting")
	}
	return r.Ready()
}

// wait blocks until no connector is live (all stopped or halted) or ctx
// is done.
func (s *supervisor) wait(ctx context.Context) {
	for {
		s.mu.Lock()
		live := false
		for _, m := range s.conns {
			// A connector stopped through the REST API keeps the process
			// serving, for its resume.
			if (m.state != stateStopped && m.state != stateHalted) || m.held || m.restarting {
				live = true
			}
		}
		ch := s.changed
		s.mu.Unlock()
		if !live {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// stopAll stops every connector at once and waits for them.
func (s *supervisor) stopAll() {
	var wg sync.WaitGroup
	for _, name := range s.order {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop(name) }()
	}
	wg.Wait()
}

// haltedNames returns the names of the halted connectors, in order.
func (s *supervisor) haltedNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, name := range s.order {
		if s.conns[name].state == stateHalted {
			names = append(names, name)
		}
	}
	return names
}

// logged marks an error already logged (each connector's halt, by
// logHalt): the command only sets the exit status from it.
type logged struct{ error }

func (e logged) Unwrap() error { return e.error }

func loggedError(err error) error {
	if err == nil {
		return nil
	}
	return logged{err}
}

// halted returns the errors of the halted connectors, joined.
func (s *supervisor) halted() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, name := range s.order {
		if m := s.conns[name]; m.state == stateHalted {
			errs = append(errs, fmt.Errorf("connector %s: %w", name, m.err))
		}
	}
	return errors.Join(errs...)
}

// Gather implements prometheus.Gatherer over every connector's current
// registry (each wraps its metrics with the connector label).
func (s *supervisor) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	gs := make(prometheus.Gatherers, 0, len(s.order))
	for _, name := range s.order {
		gs = append(gs, s.conns[name].reg)
	}
	s.mu.Unlock()
	return gs.Gather()
}

// stateCollector exports outbox_cdc_connector_state{connector, state}: 1
// for the state each connector is in, 0 for the others.
type stateCollector struct {
	s    *supervisor
	desc *prometheus.Desc
}

func newStateCollector(s *supervisor) *stateCollector {
	return &stateCollector{s: s, desc: prometheus.NewDesc("outbox_cdc_connector_state",
		"1 for the state each connector of the process is in (stopped, standby, starting, connecting, running, paused, stopping, halted), else 0.",
		[]string{"connector", "state"}, nil)}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.s.status() {
		for _, state := range allStates {
			v := 0.0
			if st.State == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, st.Name, state)
		}
	}
}

// runProcess runs every connector of pc until ctx is done or none is left
// running, with one HTTP server for all. It returns nil after a clean stop
// and the halted connectors' errors otherwise (a *configError when the
// process could not start at all).
func runProcess(ctx context.Context, pc processConfig, opts runOptions, logOut io.Writer) error {
	log := newLogger(pc.Log, logOut)
	routeLibraryLogs(log)
	procReg := prometheus.NewRegistry()
	procReg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)
	sup := newSupervisor(ctx, pc.Connectors, opts, log)
	if pc.Placement.Enabled {
		// A lost lock returns the connector to standby: placement stops
		// it when the group gives it to another replica.
		sup.exitOnLost = false
		sup.unfit, sup.idle = placement.NewUnfitSet(), map[string]*idleProbe{}
	}
	procReg.MustRegister(newStateCollector(sup))
	sup.loadHeld(ctx)

	// HTTP is up while standby too: /readyz says "standby".
	if pc.HTTP.Listen != "" {
		srv, err := serveHTTP(pc.HTTP, prometheus.Gatherers{procReg, sup}, sup, log)
		if err != nil {
			log.Error().Err(err).Str("listen", pc.HTTP.Listen).Msg("cannot serve http (set http.listen to a free address, or empty to turn it off)")
			return err
		}
		defer srv.Close()
		log.Info().Str("listen", srv.Addr).Str("scheme", pc.HTTP.TLS.scheme()).Msg("serving /metrics, /healthz, /readyz, /active, /connectors")
	}
	if pc.Placement.Enabled {
		return runPlaced(ctx, pc, sup, log)
	}
	if len(pc.Connectors) > 1 {
		log.Info().Int("connectors", len(pc.Connectors)).Str("names", connectorNames(pc.Connectors)).Msg("starting every connector")
	}
	for _, c := range pc.Connectors {
		if err := sup.Start(c.Name); err != nil {
			return err
		}
	}
	sup.wait(ctx)
	sup.stopAll()
	err := sup.halted()
	if err != nil && len(pc.Connectors) > 1 {
		// Each halt was logged when it happened.
		log.Error().Strs("halted", sup.haltedNames()).Msg("every connector has stopped; exiting")
	}
	return loggedError(err)
}

// sortedNames returns the connector names in order, for messages.
func (s *supervisor) sortedNames() []string {
	names := append([]string(nil), s.order...)
	sort.Strings(names)
	return names
}

// runPlaced runs the connectors the placement group assigns to this
// replica until ctx is done. Unlike runProcess without placement it does
// not return when no connector runs: a replica holding none waits for its
// share (and answers 200 on /readyz). It returns the halted connectors'
// errors, or placement's when the cluster refuses the group.
func runPlaced(ctx context.Context, pc processConfig, sup *supervisor, log zerolog.Logger) error {
	names := make([]string, len(pc.Connectors))
	for i, c := range pc.Connectors {
		names[i] = c.Name
	}
	secOpts, err := pc.Placement.clientOpts()
	if err != nil {
		return &configError{Msg: err.Error()}
	}
	log.Info().Int("connectors", len(names)).Str("deployment", pc.Placement.Deployment).
		Dur("session_timeout", pc.Placement.SessionTimeout).Msg("placement on: running the connectors the group assigns to this replica")
	for _, n := range names {
		sup.startIdleProbe(n)
	}
	defer sup.stopIdleProbes()
	perr := placement.Run(ctx, pc.Placement.Config, names, sup, log, secOpts...)
	if perr != nil && ctx.Err() != nil && errors.Is(perr, context.Canceled) {
		perr = nil // stopped while joining
	}
	if perr != nil {
		outboxcdc.LogError(log.Error(), perr).Msg("placement failed; stopping this replica's connectors")
	}
	sup.stopAll()
	return loggedError(errors.Join(perr, sup.halted()))
}
