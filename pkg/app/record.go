package app

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/record"
)

// newRecorder builds the traffic recorder when --record-file is set and,
// unless --record-on-start is false, starts recording into it at once,
// for as long as the process runs or until the admin API stops it. It needs the rules and the overrides
// built; the recorder is closed, its last lines written, with the app.
func (a *App) newRecorder() error {
	s := a.settings.Record
	if s.File == "" {
		return nil
	}
	rec, err := record.New(record.Options{
		Path:          s.File,
		Key:           s.Key,
		Sample:        s.Sample,
		MaxBytes:      s.MaxBytes,
		Header:        a.recordHeader,
		Logger:        a.logger,
		MeterProvider: a.telemetry.MeterProvider(),
	})
	if err != nil {
		return err
	}
	a.recorder = rec
	a.closers = append(a.closers, func() error { rec.Close(); return nil })
	if !s.OnStart {
		return nil
	}
	if err := rec.Start(record.Span{}); err != nil {
		return err
	}
	a.logger.Warn("recording every decided call of the sampled clients, descriptor values included", "file", s.File, "sample", s.Sample)
	return nil
}

// recordHeader gives each recording file the live rules' hash and
// overrides.
func (a *App) recordHeader() record.Header {
	now := time.Now()
	live := []override.Override{}
	for _, o := range a.overrides.Current().All() {
		if now.Before(o.ExpiresAt) {
			live = append(live, o)
		}
	}
	return record.Header{RulesHash: a.reloader.Current().Hash(), Overrides: live}
}

// recordOverrides writes the overrides of a change to the recording, as
// created when the live set holds them, else as deleted (or expired).
func (a *App) recordOverrides(changed []override.Override) {
	if a.recorder == nil {
		return
	}
	live := map[string]bool{}
	for _, o := range a.overrides.Current().All() {
		live[o.ID] = true
	}
	for _, o := range changed {
		change := record.ChangeDeleted
		if live[o.ID] {
			change = record.ChangeCreated
		}
		a.recorder.Override(change, o)
	}
}

// Recorder returns the traffic recorder for the admin API; nil without
// --record-file.
func (a *App) Recorder() *record.Recorder { return a.recorder }
