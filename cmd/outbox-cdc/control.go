package main

import (
	"context"
	"fmt"
	"time"
)

// The supervisor's side of the REST API's pause, resume and stop
// (restapi.go). Each may be called from any goroutine.

// Pause closes the named connector's gate: its pipeline finishes the
// transaction it holds, writes and checkpoints what it took, then takes
// nothing more; the source keeps its connection, HA lock and slot. The
// pause is kept in the checkpoint store first (stopstate.go): it outlasts
// a restart of the process and a move to another replica, and with the
// checkpoint table it reaches the replica that runs the connector. A
// connector stopped through the API starts paused.
func (s *supervisor) Pause(ctx context.Context, name string) error {
	m, err := s.managed(name)
	if err != nil {
		return err
	}
	m.target.Lock()
	if err := writeTarget(ctx, m.cfg, targetPaused, s.log); err != nil {
		m.target.Unlock()
		return fmt.Errorf("keeping the pause in the checkpoint store: %w", err)
	}
	m.gate.Pause()
	m.target.Unlock()
	return s.release(ctx, m)
}

// Resume clears the kept pause or stop, opens the gate and, for a
// connector stopped through the API, starts it.
func (s *supervisor) Resume(ctx context.Context, name string) error {
	m, err := s.managed(name)
	if err != nil {
		return err
	}
	m.target.Lock()
	if err := writeTarget(ctx, m.cfg, targetStarted, s.log); err != nil {
		m.target.Unlock()
		return fmt.Errorf("clearing the kept pause or stop: %w", err)
	}
	m.gate.Resume()
	m.target.Unlock()
	return s.release(ctx, m)
}

// release starts a connector that was stopped through the API (its kept
// stop already replaced by the caller). With the stop shared through the
// checkpoint table (sharedHold) a replica that runs the connector finds
// the resume itself within heldPoll, and one that does not (placement
// runs it elsewhere) must not start it.
func (s *supervisor) release(ctx context.Context, m *managed) error {
	s.mu.Lock()
	held := m.held
	m.held = false
	s.mu.Unlock()
	if !held || sharedHold(m.cfg) {
		return nil
	}
	return s.Start(m.cfg.Name)
}

// Hold stops the named connector gracefully and keeps it stopped (also
// across a restart of the process) until Resume: the stop is written to
// the checkpoint store first, so that a standby taking over the HA lock
// does not start it either.
func (s *supervisor) Hold(ctx context.Context, name string) error {
	m, err := s.managed(name)
	if err != nil {
		return err
	}
	m.target.Lock()
	if err := writeTarget(ctx, m.cfg, targetStopped, s.log); err != nil {
		m.target.Unlock()
		return fmt.Errorf("keeping the stop in the checkpoint store: %w", err)
	}
	s.mu.Lock()
	m.held = true
	s.mu.Unlock()
	m.gate.Resume() // a resumed connector runs, not paused
	m.target.Unlock()
	running := s.running(m)
	if err := s.Stop(name); err != nil {
		return err
	}
	// A connector not running here (placement runs it on another
	// replica) stays stopped: it starts when it is assigned here, and
	// finds the stop then.
	if sharedHold(m.cfg) && running {
		// Back to standby, looking for a resume (from any replica).
		s.mu.Lock()
		m.polling = true
		s.mu.Unlock()
		return s.Start(name)
	}
	return nil
}

// isHeld reports whether the connector was stopped through the API and is
// not running (its offsets may be changed).
func (s *supervisor) isHeld(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.conns[name]
	if m == nil || !m.held {
		return false
	}
	if m.polling {
		return true
	}
	if m.done != nil {
		select {
		case <-m.done:
		default:
			return false
		}
	}
	return true
}

// managed returns the named connector.
func (s *supervisor) managed(name string) (*managed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.conns[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", errNoConnector, name)
	}
	return m, nil
}

// config returns the named connector's configuration.
func (s *supervisor) config(name string) (Config, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.conns[name]
	if !ok {
		return Config{}, false
	}
	return m.cfg, true
}

// loadHeld reads, for every connector, whether it was stopped through the
// API, so that the REST API and Start know before its first run; a
// connector whose stop cannot be read is checked again by its run.
func (s *supervisor) loadHeld(ctx context.Context) {
	for _, name := range s.order {
		m := s.conns[name]
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		target, err := readTarget(rctx, m.cfg, s.log)
		cancel()
		if err != nil {
			continue
		}
		held := target == targetStopped
		if target == targetPaused {
			m.gate.Pause()
			s.log.Info().Str("connector", name).Str("resume", "PUT /connectors/"+name+"/resume").
				Msg("starting paused: the connector was paused through the REST API (the pause is kept in the checkpoint store)")
		}
		s.mu.Lock()
		m.held = held
		m.polling = held && sharedHold(m.cfg) // its run looks for a resume
		s.mu.Unlock()
		if held {
			s.log.Info().Str("connector", name).Str("resume", "PUT /connectors/"+name+"/resume").
				Msg("not starting: the connector was stopped through the REST API (the stop is kept in the checkpoint store)")
		}
	}
}

// running reports whether m has a run (standby, starting, running).
func (s *supervisor) running(m *managed) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}
